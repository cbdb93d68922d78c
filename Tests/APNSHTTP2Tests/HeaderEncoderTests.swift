import APNSCore
import NIOCore
import NIOHPACK
import Testing

@testable import APNSWire
@testable import HTTP2Transport

/// ``APNSHeaderEncoder`` checked against NIOHPACK's decoder, which keeps the dynamic table a
/// peer keeps: every block must decode to the request's headers, with the indexing chosen.
@Suite("Request headers and HPACK indexing")
struct HeaderEncoderTests {
    private static func request(expiration: Int64? = 1_767_225_600, collapseID: String? = "order-42") -> APNSRequest {
        APNSRequest(
            deviceToken: "a1b2c3d4",
            topic: "com.example.shop.voip",
            pushType: .voip,
            priority: .conserveEnergy,
            apnsID: "0f3a5e2c-1111-4222-8333-444455556666",
            expiration: expiration,
            collapseID: collapseID,
            payload: Array(#"{"aps":{}}"#.utf8)
        )
    }

    private struct Field: Equatable, CustomStringConvertible {
        var name: String
        var value: String
        var indexing: HPACKIndexing
        var description: String { "\(name): \(value) [\(indexing)]" }
    }

    /// One connection's encoder and the peer's decoder.
    private struct Connection {
        var encoder = APNSHeaderEncoder()
        var decoder = HPACKDecoder(allocator: .init())

        mutating func send(_ request: APNSRequest, authority: String = "h", authorization: String? = nil) throws -> [Field] {
            var block = ByteBuffer()
            encoder.encode(request, authority: authority, authorization: authorization, to: &block)
            let headers = try decoder.decodeHeaders(from: &block)
            #expect(block.readableBytes == 0)
            return headers.map { Field(name: $0.name, value: $0.value, indexing: $0.indexable) }
        }
    }

    @Test func firstRequestOnAConnection() throws {
        var connection = Connection()
        let fields = try connection.send(Self.request(), authority: "api.push.apple.com", authorization: "bearer jwt.jwt.jwt")
        #expect(
            fields == [
                Field(name: ":method", value: "POST", indexing: .indexable),
                Field(name: ":scheme", value: "https", indexing: .indexable),
                Field(name: ":path", value: "/3/device/a1b2c3d4", indexing: .nonIndexable),
                Field(name: ":authority", value: "api.push.apple.com", indexing: .indexable),
                Field(name: "authorization", value: "bearer jwt.jwt.jwt", indexing: .nonIndexable),
                Field(name: "apns-topic", value: "com.example.shop.voip", indexing: .indexable),
                Field(name: "apns-push-type", value: "voip", indexing: .indexable),
                Field(name: "apns-priority", value: "5", indexing: .indexable),
                Field(name: "apns-id", value: "0f3a5e2c-1111-4222-8333-444455556666", indexing: .indexable),
                Field(name: "apns-expiration", value: "1767225600", indexing: .indexable),
                Field(name: "apns-collapse-id", value: "order-42", indexing: .indexable),
            ]
        )
    }

    @Test func laterRequestsSendPerRequestValuesWithoutIndexing() throws {
        var connection = Connection()
        let first = try connection.send(Self.request())
        let tableSizeAfterFirst = connection.encoder.tableSize
        var next = Self.request(expiration: 1_767_225_601, collapseID: "order-43")
        next.apnsID = "0f3a5e2c-1111-4222-8333-444455556667"
        next.deviceToken = "e5f6"
        let second = try connection.send(next)
        let indexing = Dictionary(uniqueKeysWithValues: second.map { ($0.name, $0.indexing) })
        #expect(indexing["apns-id"] == .nonIndexable)
        #expect(indexing["apns-expiration"] == .nonIndexable)
        #expect(indexing["apns-collapse-id"] == .nonIndexable)
        #expect(indexing[":path"] == .nonIndexable)
        #expect(indexing["apns-topic"] == .indexable)
        #expect(indexing["authorization"] == nil)  // certificate authentication: no header
        #expect(second.first { $0.name == "apns-id" }?.value == next.apnsID)
        #expect(second.first { $0.name == ":path" }?.value == "/3/device/e5f6")
        #expect(connection.encoder.tableSize == tableSizeAfterFirst)
        #expect(first.count == second.count)
    }

    /// A request like the one before: everything that repeats is one byte (an index), the rest
    /// refers to names in the tables.
    @Test func repeatedValuesAreSentAsIndices() throws {
        var encoder = APNSHeaderEncoder()
        var first = ByteBuffer()
        encoder.encode(Self.request(), authority: "api.push.apple.com", authorization: nil, to: &first)
        var second = ByteBuffer()
        encoder.encode(Self.request(), authority: "api.push.apple.com", authorization: nil, to: &second)
        // :method, :scheme, :authority, apns-topic, apns-push-type, apns-priority: one byte each;
        // :path: name 4, length, 18 bytes. apns-id, apns-expiration and apns-collapse-id: a name
        // index above 15 (two bytes with a 4-bit prefix), length, 36, 10 and 8 bytes.
        #expect(second.readableBytes == 6 + 20 + (3 + 36) + (3 + 10) + (3 + 8))
        #expect(first.readableBytes > second.readableBytes)
    }

    @Test func optionalHeadersAreOmittedAndIndexedOnTheirOwnFirstUse() throws {
        var connection = Connection()
        let first = try connection.send(Self.request(expiration: nil, collapseID: nil))
        #expect(!first.contains { $0.name == "apns-expiration" })
        #expect(!first.contains { $0.name == "apns-collapse-id" })
        let second = try connection.send(Self.request(expiration: 0))
        #expect(second.first { $0.name == "apns-expiration" } == Field(name: "apns-expiration", value: "0", indexing: .indexable))
        #expect(second.first { $0.name == "apns-id" }?.indexing == .nonIndexable)
    }

    @Test(arguments: [(APNSPriority.immediate, "10"), (.conserveEnergy, "5"), (.prioritizePower, "1")])
    func priorityValues(_ priority: APNSPriority, _ text: String) throws {
        var request = Self.request()
        request.priority = priority
        var connection = Connection()
        #expect(try connection.send(request).first { $0.name == "apns-priority" }?.value == text)
    }

    @Test func channelRequests() throws {
        var connection = Connection()
        let broadcast = APNSRequest(
            channelID: "dHN0LXNyY2gtY2hubA==",
            bundleID: "com.example.shop",
            priority: .immediate,
            requestID: "2f3a5e2c-1111-4222-8333-444455556666",
            expiration: 0,
            payload: Array(#"{"aps":{}}"#.utf8)
        )
        let fields = try connection.send(broadcast)
        #expect(fields.first { $0.name == ":path" }?.value == broadcast.path)
        #expect(fields.first { $0.name == "apns-channel-id" } == Field(name: "apns-channel-id", value: "dHN0LXNyY2gtY2hubA==", indexing: .nonIndexable))
        #expect(fields.first { $0.name == "apns-request-id" }?.value == "2f3a5e2c-1111-4222-8333-444455556666")
        #expect(!fields.contains { $0.name == "apns-topic" || $0.name == "apns-id" })
        let delete = APNSRequest(
            channelOperation: .delete(channelID: "dHN0LXNyY2gtY2hubA=="),
            bundleID: "com.example.shop",
            requestID: "3f3a5e2c-1111-4222-8333-444455556666"
        )
        for _ in 0..<2 {
            let fields = try connection.send(delete)
            #expect(fields.first == Field(name: ":method", value: "DELETE", indexing: .indexable))
            #expect(fields.map(\.name) == [":method", ":scheme", ":path", ":authority", "apns-request-id", "apns-channel-id"])
        }
    }

    /// Many topics and push types on one connection, so entries are evicted all the time: the
    /// decoder must read every block back as sent, and the table stays within 4,096 bytes.
    @Test func evictionKeepsBothTablesInStep() throws {
        var connection = Connection()
        var generator = SystemRandomNumberGenerator()
        let pushTypes: [APNSPushType] = [.alert, .background, .voip, .liveactivity]
        for index in 0..<2_000 {
            var request = Self.request(
                expiration: index.isMultiple(of: 3) ? Int64(index) : nil,
                collapseID: index.isMultiple(of: 5) ? "collapse-\(index)" : nil
            )
            request.topic = "com.example.app\(Int.random(in: 0..<120, using: &generator))"
            request.pushType = pushTypes[index % pushTypes.count]
            request.apnsID = "00000000-0000-4000-8000-\(String(index, radix: 16))"
            let authority = index.isMultiple(of: 7) ? "api.sandbox.push.apple.com" : "api.push.apple.com"
            let fields = try connection.send(request, authority: authority, authorization: "bearer jwt-\(index / 100)")
            let values = Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
            #expect(values[":authority"] == authority)
            #expect(values["apns-topic"] == request.topic)
            #expect(values["apns-push-type"] == request.pushType.rawValue)
            #expect(values["apns-id"] == request.apnsID)
            #expect(values["apns-expiration"] == request.expiration.map { String($0) })
            #expect(values["apns-collapse-id"] == request.collapseID)
            #expect(values["authorization"] == "bearer jwt-\(index / 100)")
            #expect(connection.encoder.tableSize <= APNSHeaderEncoder.maxTableSize)
        }
    }

    /// A peer that shrinks its table (even to nothing) and grows it again between two blocks:
    /// the next block signals the smallest size, then the current one.
    @Test func followsThePeersTableSize() throws {
        var connection = Connection()
        _ = try connection.send(Self.request())
        #expect(connection.encoder.tableSize > 0)
        connection.encoder.peerAllowsTableSize(0)
        #expect(connection.encoder.tableSize == 0)
        let literal = try connection.send(Self.request())
        #expect(literal.first { $0.name == "apns-topic" }?.value == "com.example.shop.voip")
        #expect(connection.encoder.tableSize == 0)
        connection.encoder.peerAllowsTableSize(100)
        connection.encoder.peerAllowsTableSize(65_536)
        #expect(connection.encoder.tableCapacity == APNSHeaderEncoder.maxTableSize)
        for _ in 0..<3 {
            let fields = try connection.send(Self.request())
            #expect(fields.first { $0.name == "apns-topic" }?.value == "com.example.shop.voip")
        }
        #expect(connection.encoder.tableSize > 0)
    }

    /// Values longer than a one-byte length, and an entry larger than the whole table.
    @Test func longValues() throws {
        var connection = Connection()
        var request = Self.request()
        request.topic = String(repeating: "t", count: 5_000)
        request.deviceToken = String(repeating: "a", count: 300)
        let fields = try connection.send(request, authorization: "bearer " + String(repeating: "j", count: 1_000))
        #expect(fields.first { $0.name == "apns-topic" }?.value == request.topic)
        #expect(fields.first { $0.name == ":path" }?.value == "/3/device/" + request.deviceToken)
        #expect(fields.first { $0.name == "authorization" }?.value.count == 1_007)
        let again = try connection.send(request)
        #expect(again.first { $0.name == "apns-topic" }?.value == request.topic)
    }
}
