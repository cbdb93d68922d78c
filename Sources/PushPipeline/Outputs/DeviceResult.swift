import WebPushCore
import JSONCore
public import APNSCore
public import PushStores
import FCMCore

/// One push.results message: the outcome for one device (or one user without devices), or for
/// one event to a broadcast channel (``channelID`` set; no user, token or apns-id).
public struct DeviceResult: Sendable, Hashable {
    public typealias Status = DeliveryStatus

    public var eventID: String
    /// Nil for a channel's result.
    public var userID: String?
    public var token: String?
    /// The event's bundle ID, not the suffixed apns-topic.
    public var topic: String
    public var environment: APNSEnvironment?
    public var status: Status
    public var apnsStatus: Int?
    public var reason: String?
    public var apnsID: String?
    public var attempts: Int
    /// From consuming the event to the outcome.
    public var latencyMilliseconds: Int64
    /// Milliseconds since 1970.
    public var completedAtMilliseconds: Int64
    /// The broadcast channel of a channel event's result.
    public var channelID: String?
    /// The `apns-request-id` sent with a channel event (nil when no request was made).
    public var apnsRequestID: String?
    /// `apns-unique-id` from APNs' answer (the development environment sends one).
    public var apnsUniqueID: String?
    /// The service the device was sent to; nil for a user with no device (`no_devices`).
    public var platform: DevicePlatform?
    /// FCM's HTTP status (FCM results only).
    public var fcmStatus: Int?
    /// The message `name` FCM returned (FCM results only).
    public var fcmMessageID: String?
    /// The push service's HTTP status (web push results only).
    public var webPushStatus: Int?
    /// The `Location` the push service returned for the message (web push results only).
    public var webPushLocation: String?

    public init(
        eventID: String,
        userID: String?,
        token: String?,
        topic: String,
        environment: APNSEnvironment?,
        status: Status,
        apnsStatus: Int?,
        reason: String?,
        apnsID: String?,
        attempts: Int,
        latencyMilliseconds: Int64,
        completedAtMilliseconds: Int64,
        channelID: String? = nil,
        apnsRequestID: String? = nil,
        apnsUniqueID: String? = nil,
        platform: DevicePlatform? = .apns,
        fcmStatus: Int? = nil,
        fcmMessageID: String? = nil,
        webPushStatus: Int? = nil,
        webPushLocation: String? = nil
    ) {
        self.webPushStatus = webPushStatus
        self.webPushLocation = webPushLocation
        self.eventID = eventID
        self.userID = userID
        self.token = token
        self.topic = topic
        self.environment = environment
        self.status = status
        self.apnsStatus = apnsStatus
        self.reason = reason
        self.apnsID = apnsID
        self.attempts = attempts
        self.latencyMilliseconds = latencyMilliseconds
        self.completedAtMilliseconds = completedAtMilliseconds
        self.channelID = channelID
        self.apnsRequestID = apnsRequestID
        self.apnsUniqueID = apnsUniqueID
        self.platform = platform
        self.fcmStatus = fcmStatus
        self.fcmMessageID = fcmMessageID
    }

    /// The message value, with every field present (`null` when absent); `channel_id` and
    /// `apns_request_id` only for a channel's result, `apns_unique_id` only when APNs sent one,
    /// `fcm_status` and `fcm_message_id` only for an FCM result, `webpush_status` and
    /// `webpush_location` only for a web push one.
    public func json() -> [UInt8] {
        var object = JSONObjectWriter()
        object.member("event_id", eventID)
        object.member("user_id", userID)
        object.member("token", token)
        object.member("topic", topic)
        object.member("environment", environment?.rawValue)
        object.member("status", status.rawValue)
        object.member("apns_status", apnsStatus)
        object.member("reason", reason)
        object.member("apns_id", apnsID)
        object.member("attempts", attempts)
        object.member("latency_ms", latencyMilliseconds)
        object.member("completed_at", RFC3339.format(milliseconds: completedAtMilliseconds))
        object.member("platform", platform?.rawValue)
        if let channelID {
            object.member("channel_id", channelID)
            object.member("apns_request_id", apnsRequestID)
        }
        if let apnsUniqueID { object.member("apns_unique_id", apnsUniqueID) }
        if platform == .fcm {
            object.member("fcm_status", fcmStatus)
            object.member("fcm_message_id", fcmMessageID)
        }
        if platform == .webpush {
            object.member("webpush_status", webPushStatus)
            object.member("webpush_location", webPushLocation)
        }
        return object.finished()
    }
}

extension DeviceResult {
    /// The result of a send to `token` for `event`, from what the ledger kept of it: the event
    /// gives its ID, topic (for FCM, its package) and channel, and the apns-id sent is derived again.
    init(recorded send: RecordedDelivery.SendOutcome, of event: NotificationEvent, token: String, userID: String) {
        // "The apns-id sent": none when no request was made; a channel's goes in apns_request_id.
        let sentID = send.attempts > 0 && send.platform == .apns ? NotificationID.derive(eventID: event.id, token: token) : nil
        let toDevice = event.channelID == nil
        self.init(
            eventID: event.id,
            userID: toDevice ? userID : nil,
            token: toDevice ? token : nil,
            topic: event.app(of: send.platform),
            environment: send.environment,
            status: send.status,
            apnsStatus: send.apnsStatus,
            reason: send.reason,
            apnsID: toDevice ? sentID : nil,
            attempts: send.attempts,
            latencyMilliseconds: send.latencyMilliseconds,
            completedAtMilliseconds: send.completedAtMilliseconds,
            channelID: event.channelID,
            apnsRequestID: toDevice ? nil : sentID,
            apnsUniqueID: send.apnsUniqueID,
            platform: send.platform,
            fcmStatus: send.fcmStatus,
            fcmMessageID: send.fcmMessageID,
            webPushStatus: send.webPushStatus,
            webPushLocation: send.webPushLocation
        )
    }
}

/// One push.unregistered message: APNs (410) or FCM (UNREGISTERED) said the token is gone and
/// the registry row was marked.
public struct UnregisteredTokenEvent: Sendable, Hashable {
    public var token: String
    /// The bundle ID, or for FCM the Android package.
    public var topic: String
    public var userID: String
    public var environment: APNSEnvironment
    /// APNs' timestamp, or for FCM when the request that got the answer was sent; milliseconds since 1970.
    public var unregisteredAtMilliseconds: Int64
    public var eventID: String
    public var platform: DevicePlatform

    public init(
        token: String,
        topic: String,
        userID: String,
        environment: APNSEnvironment,
        unregisteredAtMilliseconds: Int64,
        eventID: String,
        platform: DevicePlatform = .apns
    ) {
        self.token = token
        self.topic = topic
        self.userID = userID
        self.environment = environment
        self.unregisteredAtMilliseconds = unregisteredAtMilliseconds
        self.eventID = eventID
        self.platform = platform
    }

    public func json() -> [UInt8] {
        var object = JSONObjectWriter(capacity: 256)
        object.member("token", token)
        object.member("topic", topic)
        object.member("user_id", userID)
        object.member("environment", environment.rawValue)
        object.member("unregistered_at", RFC3339.format(milliseconds: unregisteredAtMilliseconds))
        object.member("event_id", eventID)
        object.member("platform", platform.rawValue)
        return object.finished()
    }
}

extension NotificationEvent {
    /// The app a device of `platform` belongs to, as results and the registry name it: the
    /// bundle ID for APNs, the Android package for FCM, the web app for web push.
    func app(of platform: DevicePlatform) -> String {
        switch platform {
        case .apns: topic
        case .fcm: fcm?.package ?? topic
        case .webpush: webpush?.app ?? topic
        }
    }
}
