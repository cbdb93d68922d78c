import JSONCore
public import PushCore
public import APNSCore
public import FCMCore
public import WebPushCore

/// A validated push.requests event.
public struct NotificationEvent: Sendable, Hashable {
    /// The idempotency key, 1..128 bytes.
    public var id: String
    /// Distinct user IDs in first-seen order; empty for an event to a broadcast channel.
    public var userIDs: [String]
    /// The Live Activity broadcast channel (base64, as APNs issued it) the event goes to instead
    /// of users: one request to the broadcast endpoint, one result.
    public var channelID: String?
    /// The app's bundle ID; for an event with no APNs part (no `payload`), its Android package,
    /// or without either, its web app. Its outcomes are kept in the ledger under it.
    public var topic: String
    public var pushType: APNSPushType
    public var priority: APNSPriority
    /// UNIX seconds; 0 means "try once, do not store"; nil sends no header.
    public var expiration: Int64?
    public var collapseID: String?
    /// When set, only tokens of this environment.
    public var environment: APNSEnvironment?
    /// The APNs payload as Herald sends it (compact JSON); nil for an event to Android devices only.
    public var payload: [UInt8]?
    /// The Android part: the package and the FCM message for its devices; nil for APNs only.
    public var fcm: FCMEventPart?
    /// The browsers' part: the web app and what its subscriptions receive; nil for none.
    public var webpush: WebPushEventPart?

    /// The bundle ID whose APNs devices the event goes to; nil when it has no APNs part.
    public var apnsTopic: String? { payload == nil ? nil : topic }

    /// Validates a push.requests value against the contract; `nowMilliseconds` dates the size
    /// check of an FCM message's `ttl` (the time left until `expiration`).
    public init(json value: [UInt8]?, nowMilliseconds: Int64 = WallClock.millisecondsSince1970()) throws(InputRejection) {
        let fields = FieldReader(object: try JSONObjectDecoder.decode(value))
        let object = fields.object
        id = try fields.string("id", bytes: 1...128, required: true)!

        channelID = try fields.string("channel_id", bytes: 1...256, required: false, headerValue: true)
        userIDs = try Self.recipientUserIDs(object["user_ids"], channelID: channelID)

        let parts = try Self.parts(of: object, channelID: channelID)
        let bundleID = try fields.string("topic", bytes: 1...255, required: parts.hasAPNs, headerValue: true)

        pushType = try Self.pushType(in: fields, channelID: channelID)
        let priorities = try Self.priorities(in: fields, pushType: pushType)
        priority = priorities.apns
        expiration = try Self.expiration(in: fields, channelID: channelID)
        collapseID = try fields.string("collapse_id", bytes: 1...64, required: false, headerValue: true)

        environment = try fields.environment() ?? (channelID == nil ? nil : .production)

        if parts.hasFCM, let fcmObject = object["fcm"] {
            fcm = try FCMEventPart(
                json: fcmObject,
                priority: priorities.fcm,
                expiration: expiration,
                collapseID: collapseID,
                nowMilliseconds: nowMilliseconds
            )
        } else {
            fcm = nil
        }
        if let webPushObject = parts.webPush {
            webpush = try WebPushEventPart(json: webPushObject, priority: priority.rawValue, expiration: expiration, collapseID: collapseID)
        } else {
            webpush = nil
        }
        guard let topic = bundleID ?? fcm?.package ?? webpush?.app else {
            throw InputRejection(.schemaViolation, "topic is required")
        }
        self.topic = topic
        if parts.hasAPNs {
            payload = try Self.apnsPayload(object["payload"], channelID: channelID, pushType: pushType)
        } else {
            payload = nil
        }
    }

    /// The parts an event has: `payload` (APNs), `fcm` (Android), `webpush` (browsers, its object when present).
    /// It needs one at least; an event to a channel has only an APNs part.
    private typealias Parts = (hasAPNs: Bool, hasFCM: Bool, webPush: JSONValue?)

    /// The event's user IDs; none for an event to a broadcast channel, which must not name any
    /// and whose `channel_id` must be base64.
    private static func recipientUserIDs(_ usersValue: JSONValue?, channelID: String?) throws(InputRejection) -> [String] {
        let users = usersValue.flatMap { $0 == .null ? nil : $0 }
        guard let channelID else {
            return try Self.userIDs(users)
        }
        guard users == nil else {
            throw InputRejection(.schemaViolation, "an event names user_ids or channel_id, not both")
        }
        guard Base64Text.isValid(channelID) else {
            throw InputRejection(.schemaViolation, "channel_id must be base64, as APNs issued it")
        }
        return []
    }

    /// Which of `payload`, `fcm` and `webpush` the event has (a null one counts as absent).
    private static func parts(of object: JSONValue, channelID: String?) throws(InputRejection) -> Parts {
        let hasFCMPart = object["fcm"].map { $0 != .null } ?? false
        let hasAPNsPart = object["payload"].map { $0 != .null } ?? false
        let webPushObject = object["webpush"].flatMap { $0 == .null ? nil : $0 }
        guard hasAPNsPart || hasFCMPart || webPushObject != nil else {
            throw InputRejection(
                .schemaViolation, "an event needs payload (its APNs devices), fcm (its Android devices), webpush (its browsers), or several")
        }
        if channelID != nil, hasFCMPart || webPushObject != nil {
            throw InputRejection(.schemaViolation, "an event to a channel has no fcm or webpush part")
        }
        return (hasAPNs: hasAPNsPart, hasFCM: hasFCMPart, webPush: webPushObject)
    }

    /// `push_type`, one of the supported types; by default `alert`, or `liveactivity` (the only
    /// one allowed) for an event to a channel.
    private static func pushType(in fields: FieldReader, channelID: String?) throws(InputRejection) -> APNSPushType {
        let pushType: APNSPushType
        if let pushTypeText = try fields.string("push_type", bytes: 1...32, required: false) {
            guard let namedType = APNSPushType(rawValue: pushTypeText) else {
                throw InputRejection(.schemaViolation, "push_type \(pushTypeText) is not one of the supported types")
            }
            pushType = namedType
        } else {
            pushType = channelID == nil ? .alert : .liveactivity
        }
        if channelID != nil, pushType != .liveactivity {
            throw InputRejection(.schemaViolation, "an event to a channel must have push_type liveactivity")
        }
        return pushType
    }

    /// `priority` (1, 5 or 10, by default the push type's) for APNs and web push, and the one for FCM.
    private static func priorities(in fields: FieldReader, pushType: APNSPushType) throws(InputRejection) -> (apns: APNSPriority, fcm: Int?) {
        guard let priorityValue = try fields.integer("priority") else {
            // FCM's priority when the event names none and its push type's is 10: FCMEventPart's
            // default (`normal` for a data-only message).
            let priority = pushType.defaultPriority
            return (apns: priority, fcm: priority.rawValue == 10 ? nil : priority.rawValue)
        }
        guard let priority = APNSPriority(rawValue: Int(priorityValue)) else {
            throw InputRejection(.schemaViolation, "priority must be 1, 5 or 10")
        }
        return (apns: priority, fcm: priority.rawValue)
    }

    /// `expiration` in UNIX seconds, >= 0; by default none, or 0 for an event to a channel.
    private static func expiration(in fields: FieldReader, channelID: String?) throws(InputRejection) -> Int64? {
        let expiration: Int64? = try fields.integer("expiration") ?? (channelID == nil ? nil : 0)
        if let expiration, expiration < 0 {
            throw InputRejection(.schemaViolation, "expiration must be >= 0")
        }
        return expiration
    }

    /// The APNs `payload` as sent: a JSON object with an `aps` object, within the push type's
    /// (or a broadcast's) size limit.
    private static func apnsPayload(_ value: JSONValue?, channelID: String?, pushType: APNSPushType) throws(InputRejection) -> [UInt8] {
        guard let payload = value, case .object = payload else {
            throw InputRejection(.schemaViolation, "payload must be a JSON object")
        }
        guard case .object? = payload["aps"] else {
            throw InputRejection(.schemaViolation, "payload.aps must be a JSON object")
        }
        // The payload is the app's: forwarded as given, `\u0000` escapes included.
        let bytes = payload.serialized()
        let limit = channelID == nil ? pushType.maximumPayloadSize : Self.broadcastPayloadLimit
        guard bytes.count <= limit else {
            let kind = channelID == nil ? pushType.rawValue : "a broadcast"
            throw InputRejection(.payloadTooLarge, "payload is \(bytes.count) bytes; the limit for \(kind) is \(limit)")
        }
        return bytes
    }

    /// Apple's limit for a broadcast's payload.
    static let broadcastPayloadLimit = 5120

    /// `user_ids`: 1..1000 strings of 1..256 bytes, repeats counted once.
    private static func userIDs(_ value: JSONValue?) throws(InputRejection) -> [String] {
        guard case .array(let users)? = value else {
            throw InputRejection(.schemaViolation, "user_ids must be an array of strings")
        }
        guard (1...1000).contains(users.count) else {
            throw InputRejection(.schemaViolation, "user_ids must hold 1..1000 entries")
        }
        var seen = Set<String>()
        var userIDs: [String] = []
        for user in users {
            guard case .string(let userID) = user else {
                throw InputRejection(.schemaViolation, "user_ids must be an array of strings")
            }
            try FieldReader.check(userID, name: "user_ids[]", bytes: 1...256)
            if seen.insert(userID).inserted { userIDs.append(userID) }
        }
        return userIDs
    }
}
