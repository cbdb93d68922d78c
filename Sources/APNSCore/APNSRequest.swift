public import PushCore

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
    /// Whether the request waits behind others for a free HTTP/2 stream (not sent to APNs).
    public var precedence: StreamPrecedence = .urgent

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

    /// What a device request's `:path` puts before the token.
    public static let devicePathPrefix = "/3/device/"

    /// The request's `:path`.
    public var path: String {
        switch destination {
        case .device(let token): Self.devicePathPrefix + token
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
