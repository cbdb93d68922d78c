import APNSCore
import NIOCore
import NIOHPACK
import Testing

@testable import APNSWire

@Suite("Request headers and HPACK indexing")
struct RequestHeadersTests {
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

    private static func fields(_ headers: HPACKHeaders) -> [Field] {
        headers.map { Field(name: $0.name, value: $0.value, indexing: $0.indexable) }
    }

    @Test func firstRequestOnAConnection() {
        var state = APNSRequestHeaders.IndexingState()
        let headers = APNSRequestHeaders.make(
            for: Self.request(),
            authority: "api.push.apple.com",
            authorization: "bearer jwt.jwt.jwt",
            indexing: &state
        )
        #expect(
            Self.fields(headers) == [
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
        #expect(state == APNSRequestHeaders.IndexingState(sentAPNSID: true, sentExpiration: true, sentCollapseID: true))
    }

    @Test func laterRequestsSendPerRequestValuesWithoutIndexing() {
        var state = APNSRequestHeaders.IndexingState()
        _ = APNSRequestHeaders.make(for: Self.request(), authority: "h", authorization: nil, indexing: &state)
        let second = APNSRequestHeaders.make(for: Self.request(), authority: "h", authorization: nil, indexing: &state)
        let indexing = Dictionary(uniqueKeysWithValues: Self.fields(second).map { ($0.name, $0.indexing) })
        #expect(indexing["apns-id"] == .nonIndexable)
        #expect(indexing["apns-expiration"] == .nonIndexable)
        #expect(indexing["apns-collapse-id"] == .nonIndexable)
        #expect(indexing[":path"] == .nonIndexable)
        #expect(indexing["apns-topic"] == .indexable)
        #expect(indexing["authorization"] == nil)  // certificate authentication: no header
    }

    @Test func optionalHeadersAreOmittedAndIndexedOnTheirOwnFirstUse() {
        var state = APNSRequestHeaders.IndexingState()
        let first = APNSRequestHeaders.make(
            for: Self.request(expiration: nil, collapseID: nil),
            authority: "h",
            authorization: nil,
            indexing: &state
        )
        #expect(!first.contains(name: "apns-expiration"))
        #expect(!first.contains(name: "apns-collapse-id"))
        let second = APNSRequestHeaders.make(
            for: Self.request(expiration: 0),
            authority: "h",
            authorization: nil,
            indexing: &state
        )
        let fields = Self.fields(second)
        #expect(
            fields.first { $0.name == "apns-expiration" }
                == Field(name: "apns-expiration", value: "0", indexing: .indexable)
        )
        #expect(fields.first { $0.name == "apns-id" }?.indexing == .nonIndexable)
    }

    @Test(arguments: [(APNSPriority.immediate, "10"), (.conserveEnergy, "5"), (.prioritizePower, "1")])
    func priorityValues(_ priority: APNSPriority, _ text: String) {
        var request = Self.request()
        request.priority = priority
        var state = APNSRequestHeaders.IndexingState()
        let headers = APNSRequestHeaders.make(for: request, authority: "h", authorization: nil, indexing: &state)
        #expect(headers.first(name: "apns-priority") == text)
    }

    /// On the wire: after the first request, a request with a new device token, JWT and apns-id
    /// adds nothing to the HPACK dynamic table (those values are literals without indexing),
    /// and the decoder still sees every value.
    @Test func perRequestValuesNeverEnterTheDynamicTable() throws {
        var encoder = HPACKEncoder(allocator: .init())
        var decoder = HPACKDecoder(allocator: .init())
        var state = APNSRequestHeaders.IndexingState()
        var tableSizes: [Int] = []
        for index in 0..<3 {
            var request = Self.request()
            request.deviceToken = "feed\(index)"
            request.apnsID = "00000000-0000-4000-8000-00000000000\(index)"
            request.expiration = 1_767_225_600 + Int64(index)
            let headers = APNSRequestHeaders.make(
                for: request,
                authority: "api.push.apple.com",
                authorization: "bearer jwt-\(index)",
                indexing: &state
            )
            var block = ByteBuffer()
            try encoder.encode(headers: headers, to: &block)
            tableSizes.append(encoder.dynamicTableSize)
            let decoded = try decoder.decodeHeaders(from: &block)
            #expect(decoded.first(name: ":path") == "/3/device/feed\(index)")
            #expect(decoded.first(name: "authorization") == "bearer jwt-\(index)")
            #expect(decoded.first(name: "apns-id") == request.apnsID)
        }
        #expect(tableSizes[0] > 0)
        #expect(tableSizes[1] == tableSizes[0])
        #expect(tableSizes[2] == tableSizes[0])
    }
}
