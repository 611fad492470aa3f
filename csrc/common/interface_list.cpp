#include "common/interface_list.hpp"

namespace ucxcoll {
namespace {

std::vector<std::string> splitNames(std::string_view text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    names.emplace_back(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) {
      return names;
    }
    start = comma + 1;
  }
}

}  // namespace

bool InterfaceList::matches(std::string_view device) const {
  bool named = false;
  for (const std::string& name : names) {
    if (exact ? device == name : device.starts_with(name)) {
      named = true;
      break;
    }
  }
  return named != exclude;
}

std::optional<InterfaceList> parseInterfaceList(std::string_view text) {
  InterfaceList list;
  if (text.starts_with('^')) {
    list.exclude = true;
    text.remove_prefix(1);
  }
  if (text.starts_with('=')) {
    list.exact = true;
    text.remove_prefix(1);
  }
  if (text.empty()) {
    return std::nullopt;
  }
  list.names = splitNames(text);
  for (const std::string& name : list.names) {
    if (name.empty() || name.find_first_of(" \t^=") != std::string::npos) {
      return std::nullopt;
    }
  }
  return list;
}

InterfaceList parseUcxDeviceList(std::string_view text) {
  InterfaceList list;
  list.exact = true;
  if (text == "all") {
    list.exclude = true;  // nothing left out
    return list;
  }
  if (text.starts_with('^')) {
    list.exclude = true;
    text.remove_prefix(1);
  }
  for (std::string& name : splitNames(text)) {
    if (!name.empty()) {
      list.names.push_back(std::move(name));
    }
  }
  return list;
}

}  // namespace ucxcoll
