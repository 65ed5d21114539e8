// The text of a number in the report's outputs: report.md (coordinator/stats/render_markdown.cc)
// and the `rdattn report` tables (client/format.cc) use these, so a figure prints by one rule in
// both; the CSVs (coordinator/stats/render_csv.cc) use Shortest. An undefined value (NaN) prints
// as the caller's marker: "n/a" in report.md, "-" in the CLI, an empty field in a CSV
// (docs/report.md "Files").
#pragma once

#include <string>
#include <string_view>

namespace rdattn::numfmt {

// std::snprintf of one double with `format` ("%.4g").
std::string Printf(const char* format, double v);

// `format` applied to v ("%.3f"); "inf" / "-inf" for infinities; NaN: `undefined`.
std::string General(double v, const char* format, std::string_view undefined);

// `decimals` fixed decimals ("%.4f"); "inf" / "-inf" for infinities; NaN: `undefined`.
std::string Fixed(double v, int decimals, std::string_view undefined);

// Fixed decimals with a sign ("%+.4f": +0.0123, -0.0300); NaN: `undefined`.
std::string Signed(double v, int decimals, std::string_view undefined);

// A p-value: four decimals from 1e-4 up ("0.0312", "1.0000"), else two significant digits in
// scientific notation ("3.20e-07", "0.00e+00"); non-finite: `undefined`.
std::string PValue(double p, std::string_view undefined);

// The shortest text that reads back to the same double (std::to_chars: "0.1", "1e-07",
// "370081792"); "inf" / "-inf" for infinities; NaN: "" (the CSVs' empty field).
std::string Shortest(double v);

}  // namespace rdattn::numfmt
