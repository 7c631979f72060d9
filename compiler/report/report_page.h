#pragma once
// The static HTML, CSS and JavaScript of `kiln report`'s page; "@KILN_REPORT_DATA@" marks
// where the report's JSON goes. Self-contained: it loads nothing from anywhere.
namespace kiln {

const char* report_page_template();

}  // namespace kiln
