/// A terminal outcome exactly as it was published, so a redelivered event republishes the same
/// records instead of pushing again.
public struct RecordedDelivery: Sendable, Hashable {
    public var eventID: String
    public var token: String
    /// The event's bundle ID.
    public var topic: String
    /// The user the device belonged to when the outcome was recorded.
    public var userID: String
    /// The push.results value.
    public var result: [UInt8]
    /// The push.unregistered value, present only when this outcome marked the token unregistered.
    public var unregisteredEvent: [UInt8]?

    public init(
        eventID: String,
        token: String,
        topic: String,
        userID: String,
        result: [UInt8],
        unregisteredEvent: [UInt8]? = nil
    ) {
        self.eventID = eventID
        self.token = token
        self.topic = topic
        self.userID = userID
        self.result = result
        self.unregisteredEvent = unregisteredEvent
    }
}

/// A 410 to apply to the registry together with recording its outcome.
public struct UnregisterMark: Sendable, Hashable {
    public var topic: String
    public var token: String
    /// APNs' timestamp.
    public var at: Timestamp

    public init(topic: String, token: String, at: Timestamp) {
        self.topic = topic
        self.token = token
        self.at = at
    }
}

/// The idempotency ledger: every terminal (event, token) outcome, recorded as soon as it is known.
public protocol DeliveryLedger: Sendable {
    /// The recorded outcomes of these events, by event ID and then token.
    func recordedDeliveries(eventIDs: [String]) async throws -> [String: [String: RecordedDelivery]]

    /// Records each outcome unless one is already recorded for its (event, token), and returns,
    /// in order, the one that stands for each. An outcome with a `mark` marks its token
    /// unregistered in the same transaction as its insert and keeps its `unregisteredEvent` only
    /// if that mark changed the row; an outcome without one keeps none.
    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery]
}
