package import PushCore
package import NIOCore

/// What one kind of request is on an HTTP/2 connection of ``HTTP2ConnectionCore``: how its
/// header block and body are written, which answer headers a stream keeps, and what its caller
/// gets back. APNs' pushes and FCM's sends go through
/// the same frame code this way; a connection carries requests of one exchange.
///
/// A value per connection, kept in its state machine: it may hold per-connection state such as
/// an HPACK encoder's dynamic table.
package protocol HTTP2Exchange {
    associatedtype Request
    /// What a stream keeps from its request and from the answer's headers until the answer is complete.
    associatedtype Answer
    /// What the caller of one request gets.
    associatedtype Outcome: Sendable

    /// The server's name in errors and logs ("APNs", "FCM").
    static var peerName: String { get }

    /// What the caller of a stream above a GOAWAY's last stream ID gets: `error`, or
    /// ``HTTP2StreamNotOpened`` to have its client send it again on another connection.
    static func unprocessedStreamError(_ error: TransportError) -> any Error

    /// The reason a GOAWAY's debug data gives, for logs and errors.
    static func goAwayReason(debugData: ByteBuffer) -> String?

    /// Writes the header block (HPACK) of `request` to `block`; returns its stream's answer state.
    mutating func writeHeaderBlock(of request: Request, to block: inout ByteBuffer) -> Answer

    /// The request's body, sent in DATA frames.
    func body(of request: Request) -> [UInt8]

    /// Follows the peer's SETTINGS_HEADER_TABLE_SIZE (the encoder's dynamic table never outgrows it).
    mutating func peerAllowsTableSize(_ size: Int)

    /// An answer header other than `:status`, on a stream still waiting.
    func headerReceived(name: String, value: String, into answer: inout Answer)

    /// The most answer body bytes a stream keeps; a longer body is cut off.
    func maximumBodyBytes(of answer: Answer) -> Int

    /// The caller's outcome of an answer with `status`: `body` is nil when the answer had none, and
    /// holds only the start of it when `bodyCutOff`.
    func outcome(status: Int, answer: Answer, body: ByteBuffer?, bodyCutOff: Bool) -> Outcome
}

extension HTTP2Exchange {
    /// The debug data as text, when it is short printable ASCII (Google's servers send a word).
    package static func goAwayReason(debugData: ByteBuffer) -> String? {
        let bytes = debugData.readableBytesView
        guard bytes.count <= 128, bytes.allSatisfy({ (0x20..<0x7f).contains($0) }) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}
