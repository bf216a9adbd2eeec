#include "quartet/core/settings.hpp"

#include <cmath>

#include "quartet/core/files.hpp"

namespace quartet {

namespace {

std::string number(double x) {
  std::string text = std::to_string(x);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

std::string noted(std::string message, const std::string& note) { return note.empty() ? message : message + " " + note; }

}  // namespace

Check<int> at_least(int min, const std::string& note) {
  const std::string wrong = noted(min == 0 ? "must be >= 0" : "must be at least " + std::to_string(min), note);
  return [min, wrong](const int& v) { return v < min ? wrong : ""; };
}

// NaN fails every comparison, and so every check.
Check<double> above(double min, const std::string& note) {
  const std::string wrong = noted("must be > " + number(min), note);
  return [min, wrong](const double& v) { return v > min ? "" : wrong; };
}

Check<double> at_least(double min, const std::string& note) {
  const std::string wrong = noted("must be >= " + number(min), note);
  return [min, wrong](const double& v) { return v >= min ? "" : wrong; };
}

Check<double> within(double low, double high) {
  return [low, high](const double& v) {
    return v >= low && v <= high ? "" : "must be in [" + number(low) + ", " + number(high) + "]";
  };
}

Check<std::string> not_empty() {
  return [](const std::string& v) { return v.empty() ? "must not be empty" : ""; };
}

Check<std::string> readable_file_or_empty(const std::string& verb) {
  return [verb](const std::string& v) {
    return v.empty() || is_regular_file(v) ? "" : verb + " '" + v + "', which is not a readable file";
  };
}

Check<std::vector<std::string>> readable_files(const std::string& verb) {
  const Check<std::string> one = readable_file_or_empty(verb);
  return [one](const std::vector<std::string>& files) {
    for (const std::string& f : files)
      if (std::string wrong = one(f); !wrong.empty()) return wrong;
    return std::string();
  };
}

}  // namespace quartet
