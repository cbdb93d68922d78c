package import PushCore
package import NIOCore
import HTTP2Transport

/// One FCM HTTP v1 send as the connection writes it: a POST of a JSON body with an OAuth bearer token.
package struct FCMSendRequest: Sendable {
    /// `/v1/projects/<project>/messages:send` (after any path of the base URL).
    package var path: String
    /// The `authorization` header's value, `Bearer <access token>`.
    package var authorization: String
    package var body: [UInt8]

    package init(path: String, authorization: String, body: [UInt8]) {
        self.path = path
        self.authorization = authorization
        self.body = body
    }
}

/// FCM's answer to one send: the status, the `Retry-After` header and the body.
package struct FCMSendAnswer: Sendable {
    package var status: Int
    package var retryAfter: String?
    /// Empty when the answer had no body or a longer one than the connection keeps.
    package var body: ByteBuffer
}

/// FCM's sends on a connection (``HTTP2Exchange``). Every header is a literal without indexing,
/// so the encoder keeps no dynamic table: `:path` and `authorization` (the access token) must
/// not enter one anyway, and `:authority` and `content-type` would save about 45 bytes a request.
package struct FCMExchange: HTTP2Exchange {
    /// What a stream keeps until FCM's answer is complete.
    package struct Answer {
        var retryAfter: String?
    }

    package static var peerName: String { "FCM" }

    /// FCM did not process the stream: the client sends it again without counting an attempt.
    package static func unprocessedStreamError(_ error: TransportError) -> any Error {
        HTTP2StreamNotOpened(transportError: error)
    }

    private static let contentType = "application/json; charset=utf-8"

    private let authority: String
    private let maximumAnswerBytes: Int
    /// A SETTINGS_HEADER_TABLE_SIZE change not signalled yet: the smallest size since the last
    /// block and the current one (RFC 7541 section 4.2).
    private var unsignalledTableSize: (smallest: Int, current: Int)?
    private var tableSize = HPACKTable.defaultSize

    /// Requests name `authority`; answer bodies longer than `maximumAnswerBytes` are read as none.
    package init(authority: String, maximumAnswerBytes: Int) {
        self.authority = authority
        self.maximumAnswerBytes = maximumAnswerBytes
    }

    package mutating func writeHeaderBlock(of request: FCMSendRequest, to block: inout ByteBuffer) -> Answer {
        if let change = unsignalledTableSize {
            if change.smallest < change.current { block.writeHPACKInteger(change.smallest, prefixBits: 5, flags: 0b0010_0000) }
            block.writeHPACKInteger(change.current, prefixBits: 5, flags: 0b0010_0000)
            unsignalledTableSize = nil
        }
        block.writeHPACKInteger(3, prefixBits: 7, flags: 0b1000_0000)  // :method POST
        block.writeHPACKInteger(7, prefixBits: 7, flags: 0b1000_0000)  // :scheme https
        // Literals without indexing, each naming its static table entry (RFC 7541 appendix A).
        block.writeHPACKInteger(4, prefixBits: 4, flags: 0)  // :path
        block.writeHPACKString(request.path)
        block.writeHPACKInteger(1, prefixBits: 4, flags: 0)  // :authority
        block.writeHPACKString(authority)
        block.writeHPACKInteger(23, prefixBits: 4, flags: 0)  // authorization
        block.writeHPACKString(request.authorization)
        block.writeHPACKInteger(31, prefixBits: 4, flags: 0)  // content-type
        block.writeHPACKString(Self.contentType)
        block.writeHPACKInteger(28, prefixBits: 4, flags: 0)  // content-length
        block.writeHPACKString(String(request.body.count))
        return Answer()
    }

    package func body(of request: FCMSendRequest) -> [UInt8] { request.body }

    /// No entry is ever added, but a smaller table must still be acknowledged in the next block.
    package mutating func peerAllowsTableSize(_ size: Int) {
        let capacity = min(size, HPACKTable.defaultSize)
        guard capacity != tableSize else { return }
        tableSize = capacity
        unsignalledTableSize = (min(unsignalledTableSize?.smallest ?? capacity, capacity), capacity)
    }

    package func headerReceived(name: String, value: String, into answer: inout Answer) {
        if name == "retry-after" { answer.retryAfter = value }
    }

    package func maximumBodyBytes(of answer: Answer) -> Int { maximumAnswerBytes }

    package func outcome(status: Int, answer: Answer, body: ByteBuffer?, bodyCutOff: Bool) -> FCMSendAnswer {
        FCMSendAnswer(status: status, retryAfter: answer.retryAfter, body: bodyCutOff ? ByteBuffer() : body ?? ByteBuffer())
    }
}
