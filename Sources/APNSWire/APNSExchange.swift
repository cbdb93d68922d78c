package import APNSCore
package import PushCore
package import NIOCore
package import HTTP2Transport

/// APNs' requests on a connection: header blocks from ``APNSHeaderEncoder`` with the connection's
/// provider token, and answers read as ``APNSStreamOutcome`` (the apns-id, unique ID and channel
/// ID headers, and the error body's reason and timestamp).
package struct APNSExchange: HTTP2Exchange {
    /// What a stream keeps until APNs' answer is complete.
    package struct Answer {
        /// The provider token the request carried.
        let providerToken: String?
        /// A channel management answer's body is the result; a push's is only an error reason.
        let keepsSuccessBody: Bool
        var apnsID: String?
        var uniqueID: String?
        var channelID: String?
    }

    private struct Authorization {
        var token: String
        var headerValue: String
    }

    /// Error bodies are tiny; anything beyond this is dropped.
    static var maximumBodyBytes: Int { 16 * 1024 }
    /// A channel list names up to 10,000 channels; a longer answer is cut (and fails to parse).
    static var maximumChannelManagementBodyBytes: Int { 1024 * 1024 }

    package static var peerName: String { "APNs" }

    /// The stream's `streamReset` error: the caller's retry policy decides.
    package static func unprocessedStreamError(_ error: TransportError) -> any Error { error }

    /// APNs' GOAWAY debug data is a JSON body like its answers' (`{"reason":"Shutdown"}`).
    package static func goAwayReason(debugData: ByteBuffer) -> String? { APNSResponseBody(parsing: debugData).reason }

    let authority: String
    var encoder = APNSHeaderEncoder()
    private var authorization: Authorization?

    init(authority: String, providerToken: String?) {
        self.authority = authority
        if let providerToken { installProviderToken(providerToken) }
    }

    /// Uses `token` for the `authorization` header of streams opened from now on.
    mutating func installProviderToken(_ token: String) {
        authorization = Authorization(token: token, headerValue: "bearer " + token)
    }

    package mutating func writeHeaderBlock(of request: APNSRequest, to block: inout ByteBuffer) -> Answer {
        encoder.encode(request, authority: authority, authorization: authorization?.headerValue, to: &block)
        return Answer(providerToken: authorization?.token, keepsSuccessBody: request.isChannelManagement)
    }

    package func body(of request: APNSRequest) -> [UInt8] { request.payload }

    package mutating func peerAllowsTableSize(_ size: Int) {
        encoder.peerAllowsTableSize(size)
    }

    package func headerReceived(name: String, value: String, into answer: inout Answer) {
        switch name {
        case "apns-id", "apns-request-id": answer.apnsID = value
        case "apns-unique-id": answer.uniqueID = value
        case "apns-channel-id": answer.channelID = value
        default: break
        }
    }

    package func maximumBodyBytes(of answer: Answer) -> Int {
        answer.keepsSuccessBody ? Self.maximumChannelManagementBodyBytes : Self.maximumBodyBytes
    }

    /// A cut-off body keeps its start: a channel list that fails to parse, an error reason as far as read.
    package func outcome(status: Int, answer: Answer, body: ByteBuffer?, bodyCutOff: Bool) -> APNSStreamOutcome {
        var response = APNSResponse(status: status, apnsID: answer.apnsID, uniqueID: answer.uniqueID, channelID: answer.channelID)
        if let body, body.readableBytes > 0 {
            if (200..<300).contains(status) {
                if answer.keepsSuccessBody { response.body = Array(body.readableBytesView) }
            } else {
                let parsed = APNSResponseBody(parsing: body)
                response.reason = parsed.reason.map { APNSReason(rawValue: $0) }
                response.timestampMilliseconds = parsed.timestampMilliseconds
            }
        }
        return APNSStreamOutcome(response: response, providerToken: answer.providerToken)
    }
}

extension HTTP2ConnectionCore.StateMachine where Exchange == APNSExchange {
    /// An APNs connection's machine whose streams carry `providerToken` until another is installed.
    package init(authority: String, providerToken: String?) {
        self.init(exchange: APNSExchange(authority: authority, providerToken: providerToken))
    }
}
