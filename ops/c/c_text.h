#pragma once
// Rules written once as C text: a macro holding C code is expanded into kiln (so `perform`
// runs it) and turned into a string by KILN_C_TEXT (so modules get the same code). Macros
// used inside the rule and left undefined at the KILN_C_TEXT site (its function qualifier, C
// names C++ spells differently) stay as they are, for the module's own definitions.
#define KILN_C_TEXT_(...) #__VA_ARGS__
#define KILN_C_TEXT(...) KILN_C_TEXT_(__VA_ARGS__)
