#pragma once
// Named-placeholder templates: "${name}" is replaced by values["name"]. An unknown
// placeholder fails loudly (naming it and its line) instead of emitting broken C.
#include <map>
#include <string>
#include <string_view>

namespace kiln {

using TemplateValues = std::map<std::string, std::string, std::less<>>;

// `what` names the template in errors ("elementwise loop", "op foo c_code").
std::string render_template(std::string_view text, const TemplateValues& values,
                            std::string_view what = "template");

}  // namespace kiln
