// WebPushExchange.swift: one Web Push message (RFC 8030) on Herald's HTTP/2 transport: the
// header block and encrypted body of a POST to a subscription's endpoint, and the push
// service's answer read into a `WebPushResponse`.

package import PushCore
package import NIOCore
package import WebPushCore
import HTTP2Transport

/// One Web Push message as the connection writes it: a POST of the encrypted body (`aes128gcm`)
/// to the subscription's endpoint with its VAPID `authorization`.
package struct WebPushSendRequest: Sendable {
    /// `host[:port]` of the endpoint's origin (the port only when not 443).
    package var authority: String
    /// The endpoint's path and query.
    package var path: String
    /// The message encrypted for the subscription (RFC 8291).
    package var body: [UInt8]
    /// The `ttl` header: seconds the push service keeps the message for an offline browser.
    package var ttl: Int64
    package var urgency: WebPushUrgency?
    package var topic: String?
    /// `vapid t=<JWT>, k=<public key>`.
    package var authorization: String

    package init(
        authority: String,
        path: String,
        body: [UInt8],
        ttl: Int64,
        urgency: WebPushUrgency?,
        topic: String?,
        authorization: String
    ) {
        self.authority = authority
        self.path = path
        self.body = body
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
        self.authorization = authorization
    }
}

/// Web Push sends on a connection (``HTTP2Exchange``). Every header is a literal without
/// indexing, as FCM's are, so the encoder keeps no dynamic table: `:path` (the subscription's
/// capability URL) and `authorization` must not enter one anyway.
package struct WebPushExchange: HTTP2Exchange {
    /// What a stream keeps from the answer's headers until the answer is complete.
    package struct Answer {
        var location: String?
        var retryAfter: String?
    }

    package static var peerName: String { "push service" }

    /// The push service did not process the stream: the client sends it again without counting an attempt.
    package static func unprocessedStreamError(_ error: TransportError) -> any Error {
        HTTP2StreamNotOpened(transportError: error)
    }

    private let maximumAnswerBytes: Int
    /// A SETTINGS_HEADER_TABLE_SIZE change not signalled yet: the smallest size since the last
    /// block and the current one (RFC 7541 section 4.2).
    private var unsignalledTableSize: (smallest: Int, current: Int)?
    private var tableSize = HPACKTable.defaultSize

    /// Answer bodies longer than `maximumAnswerBytes` are read as none.
    package init(maximumAnswerBytes: Int) {
        self.maximumAnswerBytes = maximumAnswerBytes
    }

    package mutating func writeHeaderBlock(of request: WebPushSendRequest, to block: inout ByteBuffer) -> Answer {
        if let change = unsignalledTableSize {
            if change.smallest < change.current { block.writeHPACKInteger(change.smallest, prefixBits: 5, flags: 0b0010_0000) }
            block.writeHPACKInteger(change.current, prefixBits: 5, flags: 0b0010_0000)
            unsignalledTableSize = nil
        }
        block.writeHPACKInteger(3, prefixBits: 7, flags: 0b1000_0000)  // :method POST
        block.writeHPACKInteger(7, prefixBits: 7, flags: 0b1000_0000)  // :scheme https
        // Literals without indexing, naming their static table entry (RFC 7541 appendix A) or,
        // for RFC 8030's own headers, the name itself.
        block.writeHeader(staticIndex: 1, request.authority)  // :authority
        block.writeHeader(staticIndex: 4, request.path)  // :path
        block.writeHeader(name: "ttl", String(request.ttl))
        block.writeHeader(staticIndex: 26, "aes128gcm")  // content-encoding
        block.writeHeader(staticIndex: 31, "application/octet-stream")  // content-type
        block.writeHeader(staticIndex: 28, String(request.body.count))  // content-length
        if let urgency = request.urgency { block.writeHeader(name: "urgency", urgency.rawValue) }
        if let topic = request.topic { block.writeHeader(name: "topic", topic) }
        block.writeHeader(staticIndex: 23, request.authorization)  // authorization
        return Answer()
    }

    package func body(of request: WebPushSendRequest) -> [UInt8] { request.body }

    /// No entry is ever added, but a smaller table must still be acknowledged in the next block.
    package mutating func peerAllowsTableSize(_ size: Int) {
        let capacity = min(size, HPACKTable.defaultSize)
        guard capacity != tableSize else { return }
        tableSize = capacity
        unsignalledTableSize = (min(unsignalledTableSize?.smallest ?? capacity, capacity), capacity)
    }

    package func headerReceived(name: String, value: String, into answer: inout Answer) {
        switch name {
        case "location": answer.location = value
        case "retry-after": answer.retryAfter = value
        default: break
        }
    }

    package func maximumBodyBytes(of answer: Answer) -> Int { maximumAnswerBytes }

    /// The answer as ``WebPushResponse`` reads it, a `Retry-After` date against the wall clock now.
    package func outcome(status: Int, answer: Answer, body: ByteBuffer?, bodyCutOff: Bool) -> WebPushResponse {
        let kept = bodyCutOff ? ByteBuffer() : body ?? ByteBuffer()
        return WebPushResponse(
            status: status,
            body: kept.readableBytesView,
            location: answer.location,
            retryAfterHeader: answer.retryAfter,
            nowMilliseconds: WallClock.millisecondsSince1970()
        )
    }
}

extension ByteBuffer {
    /// A literal header field without indexing whose name is static table entry `index`.
    fileprivate mutating func writeHeader(staticIndex index: Int, _ value: String) {
        writeHPACKInteger(index, prefixBits: 4, flags: 0)
        writeHPACKString(value)
    }

    /// A literal header field without indexing with a new name (lower-case, as HTTP/2 requires).
    fileprivate mutating func writeHeader(name: String, _ value: String) {
        writeHPACKInteger(0, prefixBits: 4, flags: 0)
        writeHPACKString(name)
        writeHPACKString(value)
    }
}
