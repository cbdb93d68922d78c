/// A request for a topic the client has no credential for. Nothing was sent, and retrying
/// cannot help until a credential for the topic is configured.
public struct APNSNoCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request's `apns-topic`.
    public let topic: String

    public init(topic: String) {
        self.topic = topic
    }

    public var description: String { "no APNs credential serves the topic \(topic)" }
}

/// A broadcast or channel management request for an app whose credential is a certificate:
/// Apple serves channels to token (JWT) authentication only. Nothing was sent.
public struct APNSTokenAuthenticationRequiredError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request's bundle ID.
    public let topic: String

    public init(topic: String) {
        self.topic = topic
    }

    public var description: String { "channel requests for \(topic) need token authentication; its credential is a certificate" }
}

/// A request that got no answer from APNs. Every case is safe to retry: APNs did not answer.
public struct APNSTransportError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case deadlineExceeded
        case connectionFailed
        case tlsHandshakeFailed
        case streamReset
        case shuttingDown
        case overloaded
    }
    private let code: Code
    /// Non-sensitive detail for logs.
    public let detail: String

    private init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// The request's deadline passed before APNs answered.
    public static func deadlineExceeded(_ detail: String = "") -> Self { .init(.deadlineExceeded, detail) }
    /// No connection could be made or it was lost before the answer.
    public static func connectionFailed(_ detail: String = "") -> Self { .init(.connectionFailed, detail) }
    /// The TLS handshake with APNs failed (an untrusted or expired certificate, for example).
    public static func tlsHandshakeFailed(_ detail: String = "") -> Self { .init(.tlsHandshakeFailed, detail) }
    /// The stream was reset or refused (for example above a GOAWAY's last stream id).
    public static func streamReset(_ detail: String = "") -> Self { .init(.streamReset, detail) }
    /// The client is shutting down and takes no new requests.
    public static func shuttingDown(_ detail: String = "") -> Self { .init(.shuttingDown, detail) }
    /// The client's queue of requests waiting for a stream is full; retry later.
    public static func overloaded(_ detail: String = "") -> Self { .init(.overloaded, detail) }

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

    /// The cause a `failed` result names in `reason` when its last attempt got no APNs answer
    /// (README, "Topics": push.results): `ConnectionFailed`, `TLSHandshakeFailed`, `Timeout` (the deadline
    /// passed, or no stream of the connections became free in time) or `StreamReset`.
    public var resultReason: String {
        switch code {
        case .connectionFailed, .shuttingDown: "ConnectionFailed"
        case .tlsHandshakeFailed: "TLSHandshakeFailed"
        case .deadlineExceeded, .overloaded: "Timeout"
        case .streamReset: "StreamReset"
        }
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
            }
        return detail.isEmpty ? name : "\(name): \(detail)"
    }
}
