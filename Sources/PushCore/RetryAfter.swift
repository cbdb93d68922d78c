/// The `Retry-After` header (RFC 9110): delay-seconds or an HTTP date (IMF-fixdate), read as
/// whole numbers, never through floating-point seconds.
public enum RetryAfter {
    /// The longest wait a header may ask for; a longer one is capped (a retry that far off is
    /// past any delivery deadline anyway).
    public static let maximum: Duration = .seconds(86_400)

    /// The wait `value` asks for, counted from `nowMilliseconds` (milliseconds since 1970) for
    /// a date; a date in the past is zero. Nil when the value is neither form.
    public static func parse(_ value: String, nowMilliseconds: Int64) -> Duration? {
        let text = value.trimmingASCIIWhitespace()
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            guard text.utf8.count <= 9, let seconds = Int64(text) else { return maximum }
            return min(.seconds(seconds), maximum)
        }
        guard let seconds = httpDateSeconds(text) else { return nil }
        let waitMilliseconds = seconds * 1000 - nowMilliseconds
        return min(.milliseconds(max(waitMilliseconds, 0)), maximum)
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let weekdays: Set<String> = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

    /// UNIX seconds of an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func httpDateSeconds(_ text: String) -> Int64? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), weekdays.contains(String(parts[0].dropLast())), parts[5] == "GMT",
            parts[1].count == 2, let day = Int64(parts[1]), (1...31).contains(day),
            let monthIndex = months.firstIndex(of: String(parts[2])),
            parts[3].count == 4, let year = Int64(parts[3]), year >= 1970
        else { return nil }
        let time = parts[4].split(separator: ":")
        guard time.count == 3, time.allSatisfy({ $0.count == 2 }),
            let hour = Int64(time[0]), let minute = Int64(time[1]), let second = Int64(time[2]),
            hour < 24, minute < 60, second <= 60
        else { return nil }
        let days = daysSince1970(year: year, month: Int64(monthIndex) + 1, day: day)
        return days * 86_400 + hour * 3600 + minute * 60 + second
    }

    /// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}

extension String {
    /// The text without leading and trailing spaces and tabs.
    func trimmingASCIIWhitespace() -> String {
        let bytes = Array(utf8)
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        guard let start = bytes.firstIndex(where: { !isSpace($0) }), let end = bytes.lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(decoding: bytes[start...end], as: UTF8.self)
    }
}
