// Python's text behaviour that templates observe, reproduced byte for byte:
// str() and repr() of values, json.dumps() as Hugging Face's tojson calls it,
// float formatting, str.isspace() for strip()/split(), str.splitlines(), and
// code-point indexing (Python strings index by code point, ours are UTF-8).
#ifndef DIKKAT_MODEL_CHAT_PYTHON_TEXT_H_
#define DIKKAT_MODEL_CHAT_PYTHON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat/value.h"

namespace dikkat::chat {

// str(value): strings as they are, None -> "None", True -> "True", floats as
// repr(float), containers as their repr. Undefined -> "".
std::string PyStr(const Value& value);
// repr(value): strings quoted the way Python picks quotes.
std::string PyRepr(const Value& value);
// repr(float): the shortest digits that round-trip, "1.0", "1e-05", "1e+16".
std::string PyFloat(double f);

// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=False) with
// the default separators (", " and ": ", or "," and ": " when indented).
// indent: null for indent=None, else the string repeated per level (Python
// turns indent=n into n spaces; 0 or less still breaks lines). Fails on
// values JSON cannot hold (undefined, callables, namespaces, generators), as
// json.dumps raises TypeError, and (a limit) past max_bytes of output.
std::string JsonDumps(const Value& value, const std::string* indent, size_t max_bytes);

// The UTF-8 sequence length of the code point starting at s[i] (1 for an
// invalid lead byte, so that any byte string walks to its end).
size_t Utf8Length(std::string_view s, size_t i);
// Byte offsets of each code point's start, plus s.size() at the end.
std::vector<size_t> CodePointOffsets(std::string_view s);
// Whether the code point at s[i] is whitespace by Python's str.isspace();
// *length gets its byte length.
bool IsPySpaceAt(std::string_view s, size_t i, size_t* length);

std::string_view PyStrip(std::string_view s, bool left, bool right);
// str.strip(chars): strips the code points in `chars`.
std::string_view PyStripChars(std::string_view s, std::string_view chars, bool left, bool right);
// str.split() (no separator): runs of whitespace, no empty pieces.
std::vector<std::string> PySplitWhitespace(std::string_view s, int maxsplit);
// str.splitlines(): \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029.
std::vector<std::string> PySplitLines(std::string_view s);

// markupsafe.escape(): & < > ' " as HTML entities.
std::string HtmlEscape(std::string_view s);

// str.lower() / str.upper() for ASCII, Latin-1, Latin Extended-A (Turkish
// İ -> "i̇", ı -> I; ß -> SS), Greek and Cyrillic; other code points are left
// as they are (Python maps all of Unicode; Greek final sigma is not applied).
std::string PyLower(std::string_view s);
std::string PyUpper(std::string_view s);
// str.title(): a cased letter after a cased letter is lowered, others upped.
std::string PyTitle(std::string_view s);
// str.capitalize(): the first code point upped, the rest lowered.
std::string PyCapitalize(std::string_view s);

}  // namespace dikkat::chat

#endif  // DIKKAT_MODEL_CHAT_PYTHON_TEXT_H_
