public import APNSCore

/// Where an event's outcomes live in the ledger: its ID within its app, and the UTC day of the
/// Kafka record that carried it. The record's timestamp is the same on every redelivery, so a
/// redelivered event finds its outcomes in one day partition; the day is also what the ledger's
/// retention counts from, as Kafka's own retention does.
public struct LedgerEvent: Sendable, Hashable {
    public var eventID: String
    /// The event's bundle ID: two apps may use the same event IDs.
    public var topic: String
    /// Days since 1970-01-01 (UTC) of the record's timestamp.
    public var day: Int32

    public init(eventID: String, topic: String, day: Int32) {
        self.eventID = eventID
        self.topic = topic
        self.day = day
    }

    /// The event of a record with this timestamp (milliseconds since 1970).
    public init(eventID: String, topic: String, recordTimestampMilliseconds: Int64) {
        self.init(eventID: eventID, topic: topic, day: Self.day(ofMilliseconds: recordTimestampMilliseconds))
    }

    /// How long the ledger keeps an event's outcomes, counted from its record's timestamp, unless
    /// HERALD_LEDGER_RETENTION_HOURS says otherwise: 168 hours, Kafka's default `retention.ms`,
    /// the longest a record can wait to be redelivered.
    public static let defaultRetention: Duration = .seconds(168 * 3600)

    /// The UTC day, counted from 1970-01-01, of an instant in milliseconds since 1970.
    public static func day(ofMilliseconds milliseconds: Int64) -> Int32 {
        let (quotient, remainder) = milliseconds.quotientAndRemainder(dividingBy: 86_400_000)
        return Int32(clamping: remainder < 0 ? quotient - 1 : quotient)
    }
}

/// The `status` of a push.results record.
public enum DeliveryStatus: String, Sendable, Hashable, CaseIterable {
    case delivered
    case unregistered
    case rejected
    case failed
    case expired
    case noDevices = "no_devices"
}

/// What the ledger keeps of one terminal outcome: with the event it belongs to, enough to
/// publish its push.results record, and the push.unregistered event it caused, byte for byte
/// as the first time, and nothing more.
public struct RecordedDelivery: Sendable, Hashable {
    /// What was recorded.
    public enum Outcome: Sendable, Hashable {
        /// An APNs send's outcome, to a device or a broadcast channel.
        case send(SendOutcome)
        /// A whole result message with the push.unregistered event it caused, if any: answers a
        /// send's fields do not describe (channel management), and outcomes recorded before the
        /// ledger kept fields.
        case message(result: [UInt8], unregisteredEvent: [UInt8]?)
    }

    /// The outcome of a send, in the fields of its push.results record that the event does not
    /// determine.
    public struct SendOutcome: Sendable, Hashable {
        /// Never `noDevices`, which is not recorded.
        public var status: DeliveryStatus
        public var environment: APNSEnvironment
        public var apnsStatus: Int?
        public var reason: String?
        public var attempts: Int
        public var latencyMilliseconds: Int64
        public var completedAtMilliseconds: Int64
        public var apnsUniqueID: String?
        /// APNs' 410 timestamp (for FCM, when the request that got UNREGISTERED was sent), kept
        /// only when this outcome marked the token unregistered (its push.unregistered event is
        /// then published with the result).
        public var unregisteredAtMilliseconds: Int64?
        /// The service the device was sent to.
        public var platform: DevicePlatform
        /// FCM's HTTP status (FCM outcomes only).
        public var fcmStatus: Int?
        /// The message `name` FCM returned (FCM outcomes only).
        public var fcmMessageID: String?
        /// The push service's HTTP status (web push outcomes only).
        public var webPushStatus: Int?
        /// The `Location` the push service returned for the message (web push outcomes only).
        public var webPushLocation: String?

        public init(
            status: DeliveryStatus,
            environment: APNSEnvironment,
            apnsStatus: Int?,
            reason: String?,
            attempts: Int,
            latencyMilliseconds: Int64,
            completedAtMilliseconds: Int64,
            apnsUniqueID: String? = nil,
            unregisteredAtMilliseconds: Int64? = nil,
            platform: DevicePlatform = .apns,
            fcmStatus: Int? = nil,
            fcmMessageID: String? = nil,
            webPushStatus: Int? = nil,
            webPushLocation: String? = nil
        ) {
            self.webPushStatus = webPushStatus
            self.webPushLocation = webPushLocation
            self.status = status
            self.environment = environment
            self.apnsStatus = apnsStatus
            self.reason = reason
            self.attempts = attempts
            self.latencyMilliseconds = latencyMilliseconds
            self.completedAtMilliseconds = completedAtMilliseconds
            self.apnsUniqueID = apnsUniqueID
            self.unregisteredAtMilliseconds = unregisteredAtMilliseconds
            self.platform = platform
            self.fcmStatus = fcmStatus
            self.fcmMessageID = fcmMessageID
        }
    }

    public var event: LedgerEvent
    /// What the outcome is for: the device, or the pipeline's key of a target that is not one.
    public var target: LedgerTarget
    /// The user the device belonged to when the outcome was recorded ("" for other targets).
    public var userID: String
    public var outcome: Outcome

    public init(event: LedgerEvent, target: LedgerTarget, userID: String, outcome: Outcome) {
        self.event = event
        self.target = target
        self.userID = userID
        self.outcome = outcome
    }

    /// The target's token: the device token, or the key of a target that is not a device.
    public var token: String { target.token }

    /// The outcome of a send, nil for a recorded message.
    public var sendOutcome: SendOutcome? {
        if case .send(let outcome) = outcome { outcome } else { nil }
    }

    /// The 410 timestamp a send's outcome keeps (nil for a recorded message, whose setter
    /// changes nothing).
    public var unregisteredAtMilliseconds: Int64? {
        get { sendOutcome?.unregisteredAtMilliseconds }
        set {
            if case .send(var send) = outcome {
                send.unregisteredAtMilliseconds = newValue
                outcome = .send(send)
            }
        }
    }
}

/// What a ledger outcome is for, with its kind: the kind is part of the ledger's key, so two
/// targets of one event never share an outcome, however alike their tokens look (an FCM token
/// may spell another's bytes in hex, or be an APNs token's text).
public struct LedgerTarget: Sendable, Hashable {
    /// The kinds of target an event's outcomes are for.
    public enum Kind: Sendable, Hashable {
        /// An APNs device; its token is lowercase hex.
        case apnsDevice
        /// An FCM device: a registration token or Installation ID, exactly as the app got it.
        case fcmDevice
        /// A browser subscription: its endpoint.
        case webPushDevice
        /// Anything else the pipeline records an outcome for: a broadcast channel, a channel command.
        case other
    }

    public var kind: Kind
    public var token: String

    public init(_ kind: Kind, _ token: String) {
        self.kind = kind
        self.token = token
    }

    /// The target of a device of `platform` with this token.
    public init(device token: String, platform: DevicePlatform) {
        switch platform {
        case .apns: self.init(.apnsDevice, token)
        case .fcm: self.init(.fcmDevice, token)
        case .webpush: self.init(.webPushDevice, token)
        }
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

/// The idempotency ledger: every terminal (event, token) outcome, recorded as soon as it is known
/// and kept for a retention counted from the event's record day.
public protocol DeliveryLedger: Sendable {
    /// The recorded outcomes of these events, by event and then target.
    func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [LedgerTarget: RecordedDelivery]]

    /// Records each outcome unless one is already recorded for its (event, target), and returns,
    /// in order, the one that stands for each. An outcome with a `mark` marks its token
    /// unregistered in the same transaction as its insert and keeps its
    /// `unregisteredAtMilliseconds` only if that mark changed the row; an outcome without one
    /// keeps none.
    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery]
}
