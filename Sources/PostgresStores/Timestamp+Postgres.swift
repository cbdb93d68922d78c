public import PushStores
public import NIOCore
public import PostgresNIO

/// Bound and read as `timestamptz` in PostgreSQL's binary form, an Int64 of microseconds since
/// 2000-01-01: exact, unlike `Date`, which postgres-nio converts through `Double` seconds.
extension Timestamp: PostgresNonThrowingEncodable, PostgresDecodable {
    /// PostgreSQL's epoch (2000-01-01T00:00:00Z) in microseconds since 1970.
    static let postgresEpochMicroseconds: Int64 = 946_684_800_000_000

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
