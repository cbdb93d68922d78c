import APNSCore
import PushCore

/// An instant as whole microseconds since 1970-01-01T00:00:00Z.
///
/// Registry timestamps travel as integers from parsing to PostgreSQL and back, never through
/// floating-point seconds: `timestamptz` keeps microseconds, so a millisecond timestamp (APNs'
/// 410, a push.tokens `…40.748Z`) is stored and read back exactly, and the ordering rule's
/// "equal timestamps do not apply" compares what was sent.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var microsecondsSince1970: Int64

    public init(microsecondsSince1970: Int64) {
        self.microsecondsSince1970 = microsecondsSince1970
    }

    public init(millisecondsSince1970: Int64) {
        self.init(microsecondsSince1970: millisecondsSince1970 * 1000)
    }

    /// Whole milliseconds, rounded towards the past.
    public var millisecondsSince1970: Int64 {
        let (quotient, remainder) = microsecondsSince1970.quotientAndRemainder(dividingBy: 1000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.microsecondsSince1970 < rhs.microsecondsSince1970
    }

    public var description: String { "\(microsecondsSince1970)µs" }

    /// The wall clock now, read as integers (``WallClock``).
    public static func now() -> Timestamp {
        Timestamp(microsecondsSince1970: WallClock.microsecondsSince1970())
    }
}
