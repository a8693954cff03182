// The console's pure pieces: form decoding, HTML and URL escaping, payloads shown safely
// (net/console.h). The pages
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

TEST(ConsoleFormTest, CollectsEveryValueOfARepeatedField) {
  EXPECT_EQ(FormValues("id=a&x=1&id=b%2Bc&id=", "id"), (std::vector<std::string>{"a", "b+c", ""}));
  EXPECT_TRUE(FormValues("ids=a&id", "id").empty());
}

TEST(ConsoleUrlTest, EncodesAllButUnreservedCharacters) {
  EXPECT_EQ(UrlEncode("orders:eu-1.x_y~"), "orders%3Aeu-1.x_y~");
  EXPECT_EQ(UrlEncode("a b&c=d/\xc3\xa9"), "a%20b%26c%3Dd%2F%C3%A9");
}

TEST(ConsolePayloadTest, TextIsEscapedBinaryIsHexAndLongIsCut) {
  EXPECT_EQ(ShowBytes("<b>hi</b>\tthere\n", 100), "&lt;b&gt;hi&lt;/b&gt;\tthere\n");
  EXPECT_EQ(ShowBytes("h\xc3\xa9llo", 100), "h\xc3\xa9llo");  // UTF-8 is text
  EXPECT_EQ(ShowBytes(std::string("\x00\x01\xfe", 3), 100),
            "<span class=\"muted\">hex:</span> 0001 fe");
  EXPECT_EQ(ShowBytes("\xc3(", 100), "<span class=\"muted\">hex:</span> c328");  // bad UTF-8
  EXPECT_EQ(ShowBytes("\x1b[31m", 100), "<span class=\"muted\">hex:</span> 1b5b 3331 6d");
  EXPECT_EQ(ShowBytes("abcdef", 4),
            "abcd <span class=\"muted\">&hellip; (6 bytes, the first 4 shown)</span>");
  // Text is cut on a character boundary, not inside one.
  EXPECT_EQ(ShowBytes("ab\xc3\xa9"
                      "cd",
                      3),
            "ab <span class=\"muted\">&hellip; (6 bytes, the first 2 shown)</span>");
  EXPECT_EQ(ShowBytes("", 10), "");
}

}  // namespace
}  // namespace deferq::net
