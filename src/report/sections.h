// The sections of the HTML report (report.cpp assembles them). Each returns the HTML of
// one <section>.
#pragma once

#include <string>

#include "qbc/report/report.h"

namespace qbc::report {

std::string config_section(const ReportInput& in);
std::string accuracy_section(const Accuracy& a);
std::string weight_bits_section(const isa::Bundle& b);
std::string memory_section(const isa::Bundle& b);
StatusOr<std::string> cost_section(const ReportInput& in);
std::string passes_section(const ReportInput& in);

/// The colour of each cost-model bound (also used by the legend).
const char* bound_color(npu::Bound b);

}  // namespace qbc::report
