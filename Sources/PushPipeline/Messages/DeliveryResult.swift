public import APNSCore
public import DeviceTokenStore

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
        apnsUniqueID: String? = nil
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
    }

    /// The message value, with every field present (`null` when absent); `channel_id` and
    /// `apns_request_id` only for a channel's result, `apns_unique_id` only when APNs sent one.
    public func json() -> [UInt8] {
        var fields: [(String, JSONValue)] = [
            ("event_id", .string(eventID)),
            ("user_id", userID.map(JSONValue.string) ?? .null),
            ("token", token.map(JSONValue.string) ?? .null),
            ("topic", .string(topic)),
            ("environment", environment.map { .string($0.rawValue) } ?? .null),
            ("status", .string(status.rawValue)),
            ("apns_status", apnsStatus.map { .number(String($0)) } ?? .null),
            ("reason", reason.map(JSONValue.string) ?? .null),
            ("apns_id", apnsID.map(JSONValue.string) ?? .null),
            ("attempts", .number(String(attempts))),
            ("latency_ms", .number(String(latencyMilliseconds))),
            ("completed_at", .string(RFC3339.format(milliseconds: completedAtMilliseconds))),
        ]
        if let channelID {
            fields.append(("channel_id", .string(channelID)))
            fields.append(("apns_request_id", apnsRequestID.map(JSONValue.string) ?? .null))
        }
        if let apnsUniqueID { fields.append(("apns_unique_id", .string(apnsUniqueID))) }
        return JSONValue.object(fields).serialized()
    }
}

extension DeliveryResult {
    /// The result of a send to `token` for `event`, from what the ledger kept of it: the event
    /// gives its ID, topic and channel, and the apns-id sent is derived again.
    init(recorded send: RecordedDelivery.SendOutcome, of event: NotificationEvent, token: String, userID: String) {
        // "The apns-id sent": none when no request was made; a channel's goes in apns_request_id.
        let sentID = send.attempts > 0 ? NotificationID.derive(eventID: event.id, token: token) : nil
        let toDevice = event.channelID == nil
        self.init(
            eventID: event.id,
            userID: toDevice ? userID : nil,
            token: toDevice ? token : nil,
            topic: event.topic,
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
            apnsUniqueID: send.apnsUniqueID
        )
    }
}

/// One push.unregistered message: APNs said the token is gone and the registry row was marked.
public struct UnregisteredTokenEvent: Sendable, Hashable {
    public var token: String
    public var topic: String
    public var userID: String
    public var environment: APNSEnvironment
    /// APNs' timestamp, milliseconds since 1970.
    public var unregisteredAtMilliseconds: Int64
    public var eventID: String

    public init(
        token: String,
        topic: String,
        userID: String,
        environment: APNSEnvironment,
        unregisteredAtMilliseconds: Int64,
        eventID: String
    ) {
        self.token = token
        self.topic = topic
        self.userID = userID
        self.environment = environment
        self.unregisteredAtMilliseconds = unregisteredAtMilliseconds
        self.eventID = eventID
    }

    public func json() -> [UInt8] {
        JSONValue.object([
            ("token", .string(token)),
            ("topic", .string(topic)),
            ("user_id", .string(userID)),
            ("environment", .string(environment.rawValue)),
            ("unregistered_at", .string(RFC3339.format(milliseconds: unregisteredAtMilliseconds))),
            ("event_id", .string(eventID)),
        ]).serialized()
    }
}
