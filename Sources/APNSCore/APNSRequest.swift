/// One notification for one device, as it goes to `POST /3/device/<token>`.
public struct APNSRequest: Sendable, Hashable {
    /// The device token, lowercase hex.
    public var deviceToken: String
    /// The `apns-topic` header: the bundle ID plus the push type's suffix.
    public var topic: String
    public var pushType: APNSPushType
    public var priority: APNSPriority
    /// The `apns-id` header: a lowercase UUID.
    public var apnsID: String
    /// `apns-expiration` in UNIX seconds; nil sends no header.
    public var expiration: Int64?
    /// `apns-collapse-id`; nil sends no header.
    public var collapseID: String?
    /// The JSON payload, sent as is.
    public var payload: [UInt8]

    public init(
        deviceToken: String,
        topic: String,
        pushType: APNSPushType,
        priority: APNSPriority,
        apnsID: String,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        payload: [UInt8]
    ) {
        self.deviceToken = deviceToken
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.apnsID = apnsID
        self.expiration = expiration
        self.collapseID = collapseID
        self.payload = payload
    }

    /// The request's `:path`.
    public var path: String { "/3/device/" + deviceToken }

    /// The app's bundle ID: ``topic`` without the suffix Apple requires for ``pushType``.
    public var bundleID: Substring {
        let suffix = pushType.topicSuffix
        guard !suffix.isEmpty, topic.utf8.count > suffix.utf8.count, topic.hasSuffix(suffix) else {
            return topic[...]
        }
        return topic.dropLast(suffix.count)
    }
}

/// APNs' answer to one request.
public struct APNSResponse: Sendable, Hashable {
    /// The HTTP status (200 on success).
    public var status: Int
    /// The `apns-id` APNs echoed, if any.
    public var apnsID: String?
    /// The error reason from the JSON body; nil on success.
    public var reason: APNSReason?
    /// For 410: when APNs learned the token stopped being valid, in milliseconds since 1970.
    public var timestampMilliseconds: Int64?

    public init(status: Int, apnsID: String? = nil, reason: APNSReason? = nil, timestampMilliseconds: Int64? = nil) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
    }
}

/// Sends requests to APNs. The pipeline depends on this protocol only, not on a transport.
public protocol APNSClientProtocol: Sendable {
    /// Sends one request to the environment's host and returns APNs' answer.
    ///
    /// Throws ``APNSTransportError`` when no answer arrived (deadline, connection loss, reset
    /// stream), ``APNSNoCredentialError`` when no credential serves the request's topic.
    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws
        -> APNSResponse
}

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
    /// (DESIGN.md section 2): `ConnectionFailed`, `TLSHandshakeFailed`, `Timeout` (the deadline
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
