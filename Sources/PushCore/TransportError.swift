/// A request that got no answer from its push service (APNs, FCM, a web push service). Every
/// case is safe to retry: the service did not answer.
public struct TransportError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case deadlineExceeded
        case connectionFailed
        case tlsHandshakeFailed
        case streamReset
        case shuttingDown
        case overloaded
        case accessTokenUnavailable
    }
    private let code: Code
    /// Non-sensitive detail for logs.
    public let detail: String

    private init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// The request's deadline passed before the service answered.
    public static func deadlineExceeded(_ detail: String = "") -> Self { .init(.deadlineExceeded, detail) }
    /// No connection could be made or it was lost before the answer.
    public static func connectionFailed(_ detail: String = "") -> Self { .init(.connectionFailed, detail) }
    /// The TLS handshake failed (an untrusted or expired certificate, for example).
    public static func tlsHandshakeFailed(_ detail: String = "") -> Self { .init(.tlsHandshakeFailed, detail) }
    /// The stream was reset or refused (for example above a GOAWAY's last stream id).
    public static func streamReset(_ detail: String = "") -> Self { .init(.streamReset, detail) }
    /// The client is shutting down and takes no new requests.
    public static func shuttingDown(_ detail: String = "") -> Self { .init(.shuttingDown, detail) }
    /// The client's queue of requests waiting for a stream is full; retry later.
    public static func overloaded(_ detail: String = "") -> Self { .init(.overloaded, detail) }
    /// No access token could be had for the request (FCM: the token endpoint refused the
    /// assertion or could not be reached); nothing was sent.
    public static func accessTokenUnavailable(_ detail: String = "") -> Self { .init(.accessTokenUnavailable, detail) }

    /// True when the deadline ran out.
    public var isDeadlineExceeded: Bool { code == .deadlineExceeded }
    /// True when no connection could be made (including a failed TLS handshake) or it was lost
    /// before the answer.
    public var isConnectionFailure: Bool { code == .connectionFailed || code == .tlsHandshakeFailed }
    /// True when the stream was reset or refused (for example above a GOAWAY's last stream id).
    public var isStreamReset: Bool { code == .streamReset }
    /// True when the client is shutting down.
    public var isShuttingDown: Bool { code == .shuttingDown }
    /// True when the client's queue of requests waiting for a stream was full.
    public var isOverloaded: Bool { code == .overloaded }
    /// True when no access token could be had.
    public var isAccessTokenUnavailable: Bool { code == .accessTokenUnavailable }

    /// The cause a `failed` result names in `reason` when its last attempt got no answer:
    /// `ConnectionFailed`, `TLSHandshakeFailed`, `Timeout` (the deadline passed, or no stream of
    /// the connections became free in time), `StreamReset` or `AccessTokenUnavailable`.
    public var resultReason: String {
        switch code {
        case .connectionFailed, .shuttingDown: "ConnectionFailed"
        case .tlsHandshakeFailed: "TLSHandshakeFailed"
        case .deadlineExceeded, .overloaded: "Timeout"
        case .streamReset: "StreamReset"
        case .accessTokenUnavailable: "AccessTokenUnavailable"
        }
    }

    /// Any error of a request read as a transport error (none carries a secret): itself when it
    /// is one, else a time-out when the request's deadline had passed, else a connection failure.
    public static func reading(_ error: any Error, deadlinePassed: Bool) -> Self {
        if let error = error as? Self { return error }
        if deadlinePassed { return .deadlineExceeded("\(type(of: error))") }
        return .connectionFailed("\(error)")
    }

    /// The same error with `prefix` before its detail.
    public func detailed(_ prefix: String) -> Self {
        .init(code, detail.isEmpty ? prefix : "\(prefix): \(detail)")
    }

    public var description: String {
        let name =
            switch code {
            case .deadlineExceeded: "deadline exceeded"
            case .connectionFailed: "connection failed"
            case .tlsHandshakeFailed: "TLS handshake failed"
            case .streamReset: "stream reset"
            case .shuttingDown: "shutting down"
            case .overloaded: "overloaded"
            case .accessTokenUnavailable: "no access token"
            }
        return detail.isEmpty ? name : "\(name): \(detail)"
    }
}
