import JSONCore
public import APNSCore
public import DeviceTokenStore
import FCMCore

/// One push.results message: the outcome for one device (or one user without devices), or for
/// one event to a broadcast channel (``channelID`` set; no user, token or apns-id).
public struct DeliveryResult: Sendable, Hashable {
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
        fcmMessageID: String? = nil
    ) {
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
    /// `fcm_status` and `fcm_message_id` only for an FCM result.
    public func json() -> [UInt8] {
        var fields: [JSONValue.Member] = [
            .init("event_id", .string(eventID)),
            .init("user_id", userID.map(JSONValue.string) ?? .null),
            .init("token", token.map(JSONValue.string) ?? .null),
            .init("topic", .string(topic)),
            .init("environment", environment.map { .string($0.rawValue) } ?? .null),
            .init("status", .string(status.rawValue)),
            .init("apns_status", apnsStatus.map { .number(String($0)) } ?? .null),
            .init("reason", reason.map(JSONValue.string) ?? .null),
            .init("apns_id", apnsID.map(JSONValue.string) ?? .null),
            .init("attempts", .number(String(attempts))),
            .init("latency_ms", .number(String(latencyMilliseconds))),
            .init("completed_at", .string(RFC3339.format(milliseconds: completedAtMilliseconds))),
            .init("platform", platform.map { .string($0.rawValue) } ?? .null),
        ]
        if let channelID {
            fields.append(.init("channel_id", .string(channelID)))
            fields.append(.init("apns_request_id", apnsRequestID.map(JSONValue.string) ?? .null))
        }
        if let apnsUniqueID { fields.append(.init("apns_unique_id", .string(apnsUniqueID))) }
        if platform == .fcm {
            fields.append(.init("fcm_status", fcmStatus.map { .number(String($0)) } ?? .null))
            fields.append(.init("fcm_message_id", fcmMessageID.map(JSONValue.string) ?? .null))
        }
        return JSONValue.object(fields).serialized()
    }
}

extension DeliveryResult {
    /// The result of a send to `token` for `event`, from what the ledger kept of it: the event
    /// gives its ID, topic (for FCM, its package) and channel, and the apns-id sent is derived again.
    init(recorded send: RecordedDelivery.SendOutcome, of event: NotificationEvent, token: String, userID: String) {
        // "The apns-id sent": none when no request was made; a channel's goes in apns_request_id.
        let fcm = send.platform == .fcm
        let sentID = send.attempts > 0 && !fcm ? NotificationID.derive(eventID: event.id, token: token) : nil
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
            fcmMessageID: send.fcmMessageID
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
        JSONValue.object([
            .init("token", .string(token)),
            .init("topic", .string(topic)),
            .init("user_id", .string(userID)),
            .init("environment", .string(environment.rawValue)),
            .init("unregistered_at", .string(RFC3339.format(milliseconds: unregisteredAtMilliseconds))),
            .init("event_id", .string(eventID)),
            .init("platform", .string(platform.rawValue)),
        ]).serialized()
    }
}

extension NotificationEvent {
    /// The app a device of `platform` belongs to, as results and the registry name it: the
    /// bundle ID for APNs, the Android package for FCM.
    func app(of platform: DevicePlatform) -> String {
        platform == .fcm ? fcm?.package ?? topic : topic
    }
}
