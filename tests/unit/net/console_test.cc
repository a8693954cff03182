// The console's pure pieces: form decoding and HTML escaping (net/console.h). The pages
// themselves are tested through a real deferq in tests/metrics/test_console.py.
#include "net/console.h"

#include <gtest/gtest.h>

namespace deferq::net {
namespace {

TEST(ConsoleFormTest, DecodesPlusAndPercentEscapes) {
  EXPECT_EQ(FormDecode("a+b%20c%2Bd"), "a b c+d");
  EXPECT_EQ(FormDecode("%e2%9c%93"), "\xe2\x9c\x93");
  // Malformed or cut escapes stay as they are.
  EXPECT_EQ(FormDecode("100%"), "100%");
  EXPECT_EQ(FormDecode("%4"), "%4");
  EXPECT_EQ(FormDecode("%zz"), "%zz");
}

TEST(ConsoleFormTest, FindsAFieldByItsWholeName) {
  EXPECT_EQ(FormValue("password=s%26cret&csrf=ab", "password"), "s&cret");
  EXPECT_EQ(FormValue("password=s%26cret&csrf=ab", "csrf"), "ab");
  EXPECT_EQ(FormValue("xpassword=1&password=2", "password"), "2");
  EXPECT_EQ(FormValue("q=&page=3", "q"), "");
  EXPECT_EQ(FormValue("flag&page=3", "flag"), "");
  EXPECT_EQ(FormValue("", "q"), "");
  EXPECT_EQ(FormValue("a=1", "b"), "");
}

TEST(ConsoleHtmlTest, EscapesEveryMarkupCharacter) {
  EXPECT_EQ(HtmlEscape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(HtmlEscape("plain text"), "plain text");
}

}  // namespace
}  // namespace deferq::net
