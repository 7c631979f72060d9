/* A shared library that is not a kiln op library: it exports no kiln_op_library(). */
int not_a_kiln_library(int x) { return x + 1; }
