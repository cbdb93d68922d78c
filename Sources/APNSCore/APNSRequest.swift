/// Where a request goes: one device, every subscriber of a Live Activity broadcast channel,
/// or Apple's channel management API.
public enum APNSDestination: Sendable, Hashable {
    /// `POST /3/device/<token>`; the token is lowercase hex.
    case device(token: String)
    /// `POST /4/broadcasts/apps/<bundle ID>` with `apns-channel-id` (iOS 18 broadcast channels).
    case channel(id: String)
    /// The channel management API (its own hosts): create, read, delete or list channels.
    case channelManagement(APNSChannelOperation)
}

/// A request to Apple's channel management API for one app.
public enum APNSChannelOperation: Sendable, Hashable {
    /// `POST /1/apps/<bundle ID>/channels`; APNs answers 201 with the new `apns-channel-id`.
    /// `messageStoragePolicy` 0 keeps no message, 1 keeps the last one for new subscribers.
    case create(messageStoragePolicy: Int)
    /// `GET /1/apps/<bundle ID>/channels` with `apns-channel-id`: the channel's settings.
    case read(channelID: String)
    /// `DELETE /1/apps/<bundle ID>/channels` with `apns-channel-id`; APNs answers 204.
    case delete(channelID: String)
    /// `GET /1/apps/<bundle ID>/all-channels`: `{"channels": [...]}`.
    case list

    /// The HTTP method.
    public var method: String {
        switch self {
        case .create: "POST"
        case .read, .list: "GET"
        case .delete: "DELETE"
        }
    }

    /// The channel the request names in `apns-channel-id`, if any.
    public var channelID: String? {
        switch self {
        case .read(let channelID), .delete(let channelID): channelID
        case .create, .list: nil
        }
    }
}

/// One request to APNs: a notification for a device or a broadcast channel, or a channel
/// management request. The path, method and headers follow from ``destination``.
public struct APNSRequest: Sendable, Hashable {
    public var destination: APNSDestination
    /// The `apns-topic` header: the bundle ID plus the push type's suffix. For channel
    /// broadcasts and management it is the bundle ID (the path carries it; no `apns-topic` is sent).
    public var topic: String
    public var pushType: APNSPushType
    public var priority: APNSPriority
    /// The `apns-id` header (`apns-request-id` for channel requests): a lowercase UUID.
    public var apnsID: String
    /// `apns-expiration` in UNIX seconds; nil sends no header.
    public var expiration: Int64?
    /// `apns-collapse-id`; nil sends no header.
    public var collapseID: String?
    /// The JSON body, sent as is.
    public var payload: [UInt8]

    /// A notification for one device.
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
        self.destination = .device(token: deviceToken)
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.apnsID = apnsID
        self.expiration = expiration
        self.collapseID = collapseID
        self.payload = payload
    }

    /// A Live Activity update for every subscriber of broadcast channel `channelID` of the app
    /// `bundleID`; `requestID` goes in `apns-request-id`.
    public init(
        channelID: String,
        bundleID: String,
        priority: APNSPriority,
        requestID: String,
        expiration: Int64,
        payload: [UInt8]
    ) {
        self.destination = .channel(id: channelID)
        self.topic = bundleID
        self.pushType = .liveactivity
        self.priority = priority
        self.apnsID = requestID
        self.expiration = expiration
        self.payload = payload
    }

    /// A channel management request for the app `bundleID`; `requestID` goes in `apns-request-id`.
    public init(channelOperation: APNSChannelOperation, bundleID: String, requestID: String) {
        self.destination = .channelManagement(channelOperation)
        self.topic = bundleID
        self.pushType = .liveactivity
        self.priority = .immediate
        self.apnsID = requestID
        if case .create(let policy) = channelOperation {
            self.payload = Array(#"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#.utf8)
        } else {
            self.payload = []
        }
    }

    /// The device token of a device notification; empty for channel requests. Setting it makes
    /// the request a device notification.
    public var deviceToken: String {
        get {
            if case .device(let token) = destination { return token }
            return ""
        }
        set { destination = .device(token: newValue) }
    }

    /// The request's `:path`.
    public var path: String {
        switch destination {
        case .device(let token): "/3/device/" + token
        case .channel: "/4/broadcasts/apps/" + topic
        case .channelManagement(.list): "/1/apps/" + topic + "/all-channels"
        case .channelManagement: "/1/apps/" + topic + "/channels"
        }
    }

    /// The request's `:method`.
    public var method: String {
        if case .channelManagement(let operation) = destination { return operation.method }
        return "POST"
    }

    /// True for requests to a broadcast channel or the channel management API, which APNs
    /// accepts with token authentication only.
    public var isChannelRequest: Bool {
        if case .device = destination { return false }
        return true
    }

    /// True for a channel management request (its answer's body is the result).
    public var isChannelManagement: Bool {
        if case .channelManagement = destination { return true }
        return false
    }

    /// The app's bundle ID: ``topic`` without the suffix Apple requires for ``pushType``.
    public var bundleID: Substring {
        guard case .device = destination else { return topic[...] }
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
    /// `apns-unique-id` (the development environment returns one, for Apple's delivery log).
    public var uniqueID: String?
    /// `apns-channel-id` of a channel management answer (the new channel's, for a create).
    public var channelID: String?
    /// The body of a successful channel management answer (a channel's settings, or the list).
    public var body: [UInt8]?

    public init(
        status: Int,
        apnsID: String? = nil,
        reason: APNSReason? = nil,
        timestampMilliseconds: Int64? = nil,
        uniqueID: String? = nil,
        channelID: String? = nil,
        body: [UInt8]? = nil
    ) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestampMilliseconds = timestampMilliseconds
        self.uniqueID = uniqueID
        self.channelID = channelID
        self.body = body
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
