import APNSCore
public import NIOCore
public import PostgresNIO

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

    /// PostgreSQL's epoch (2000-01-01T00:00:00Z) in microseconds since 1970.
    static let postgresEpochMicroseconds: Int64 = 946_684_800_000_000
}

/// Bound and read as `timestamptz` in PostgreSQL's binary form, an Int64 of microseconds since
/// 2000-01-01: exact, unlike `Date`, which postgres-nio converts through `Double` seconds.
extension Timestamp: PostgresNonThrowingEncodable, PostgresDecodable {
    public static var psqlType: PostgresDataType { .timestamptz }
    public static var psqlFormat: PostgresFormat { .binary }

    public func encode<JSONEncoder: PostgresJSONEncoder>(
        into byteBuffer: inout ByteBuffer,
        context: PostgresEncodingContext<JSONEncoder>
    ) {
        byteBuffer.writeInteger(microsecondsSince1970 - Self.postgresEpochMicroseconds)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer,
        type: PostgresDataType,
        format: PostgresFormat,
        context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard type == .timestamptz || type == .timestamp, format == .binary,
            buffer.readableBytes == 8, let microseconds = buffer.readInteger(as: Int64.self)
        else {
            throw PostgresDecodingError.Code.typeMismatch
        }
        self.init(microsecondsSince1970: microseconds + Self.postgresEpochMicroseconds)
    }
}
