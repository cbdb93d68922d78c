public import APNSCore

/// One push.results message: the outcome for one device (or one user without devices).
public struct DeliveryResult: Sendable, Hashable {
    public enum Status: String, Sendable, Hashable, CaseIterable {
        case delivered
        case unregistered
        case rejected
        case failed
        case expired
        case noDevices = "no_devices"
    }

    public var eventID: String
    public var userID: String
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

    public init(
        eventID: String,
        userID: String,
        token: String?,
        topic: String,
        environment: APNSEnvironment?,
        status: Status,
        apnsStatus: Int?,
        reason: String?,
        apnsID: String?,
        attempts: Int,
        latencyMilliseconds: Int64,
        completedAtMilliseconds: Int64
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
    }

    /// The message value, with every field present (`null` when absent).
    public func json() -> [UInt8] {
        JSONValue.object([
            ("event_id", .string(eventID)),
            ("user_id", .string(userID)),
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
        ]).serialized()
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
