#pragma once
// The current time as text, in UTC (gmtime_r: safe beside other threads).
#include <string>

namespace quartet {

std::string utc_iso();    // 2026-12-04T15:22:33Z: for files and attributes
std::string utc_stamp();  // 20261204T152233Z: for names of files and directories

}  // namespace quartet
