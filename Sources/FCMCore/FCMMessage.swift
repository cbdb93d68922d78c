public import PushCore
public import JSONCore

/// An event's `fcm` part, validated: the Android package and the message to send to each of its
/// devices.
public struct FCMEventPart: Sendable, Hashable {
    /// The Android app's package name (the registry's `topic` for FCM devices).
    public var package: String
    public var message: FCMMessage

    /// Validates the event's `fcm` object (`{"package", "message"}`) and applies the mapping of
    /// Herald's `priority` (1, 5 or 10; nil when the event names none), `expiration` (UNIX
    /// seconds; 0 = once) and `collapse_id`. `nowMilliseconds` dates the size check's `ttl`.
    public init(
        json fcm: JSONValue,
        priority: Int?,
        expiration: Int64?,
        collapseID: String?,
        nowMilliseconds: Int64
    ) throws(InputRejection) {
        guard case .object = fcm else { throw InputRejection(.schemaViolation, "fcm must be a JSON object") }
        guard let package = fcm["package"]?.stringValue else {
            throw InputRejection(.schemaViolation, "fcm.package must be a string")
        }
        guard (1...255).contains(package.utf8.count),
            !package.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F })
        else {
            throw InputRejection(.schemaViolation, "fcm.package must be 1..255 bytes without spaces or control characters")
        }
        guard let message = fcm["message"] else { throw InputRejection(.schemaViolation, "fcm.message is required") }
        self.package = package
        self.message = try FCMMessage(
            validating: message,
            priority: priority,
            expiration: expiration,
            collapseID: collapseID,
            nowMilliseconds: nowMilliseconds
        )
    }

    /// The same, from the `fcm` object's JSON text.
    public init(
        json bytes: [UInt8],
        priority: Int?,
        expiration: Int64?,
        collapseID: String?,
        nowMilliseconds: Int64
    ) throws(InputRejection) {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            throw InputRejection(.schemaViolation, "fcm is not JSON: \(error)")
        }
        try self.init(json: value, priority: priority, expiration: expiration, collapseID: collapseID, nowMilliseconds: nowMilliseconds)
    }

    /// The request for one device of the package.
    public func request(to target: FCMTarget) -> FCMRequest {
        FCMRequest(package: package, target: target, message: message)
    }
}

/// An FCM v1 `Message` without its target, validated per the contract, with Herald's fields
/// filled in: `android.priority` from `priority` (10 → `high`, else `normal`; none given: `high`,
/// but `normal` for a data-only message, as Google recommends unless the app must wake), `android.ttl` from
/// `expiration` (the seconds left when sent, `"0s"` for 0, at most 28 days) and
/// `android.collapse_key` from `collapse_id`, each unless the app's message sets it.
public struct FCMMessage: Sendable, Hashable {
    /// The largest message FCM accepts, in bytes as sent.
    public static let maximumSize = 4096
    /// FCM's longest `android.ttl`: 28 days.
    public static let maximumTTLSeconds: Int64 = 2_419_200

    /// The app's members (`notification`, `data`, `android`, `fcm_options`), as given.
    public private(set) var members: [JSONValue.Member]
    /// `android.priority` when the app's message has none: `high` or `normal`.
    public private(set) var defaultPriority: String
    /// The event's `expiration`, when `android.ttl` is Herald's to fill.
    public private(set) var ttlExpiration: Int64?
    /// `android.collapse_key` when the app's message has none.
    public private(set) var defaultCollapseKey: String?
    /// The event's `expiration` (UNIX seconds), whoever sets the `ttl`: after it nothing is sent.
    public private(set) var expiration: Int64?

    /// Validates `message` (see ``FCMMessageValidator``) and checks its size as it would be sent
    /// at `nowMilliseconds`, without the target (which Herald chooses per device).
    public init(
        validating message: JSONValue,
        priority: Int?,
        expiration: Int64?,
        collapseID: String?,
        nowMilliseconds: Int64
    ) throws(InputRejection) {
        guard case .object(let members) = message else {
            throw InputRejection(.schemaViolation, "fcm.message must be a JSON object")
        }
        try FCMMessageValidator.validate(members)
        // The app's own `android` fields, in either spelling FCM reads.
        let android = Set((message["android"]?.members ?? []).map { FCMMessageValidator.snakeCase($0.name) })
        self.members = members
        let isDataOnly = message["notification"] == nil && message["android"]?["notification"] == nil
        self.defaultPriority = (priority ?? (isDataOnly ? 5 : 10)) == 10 ? "high" : "normal"
        self.expiration = expiration
        self.ttlExpiration = android.contains("ttl") ? nil : expiration
        self.defaultCollapseKey = android.contains("collapse_key") ? nil : collapseID
        let size = self.messageObject(target: nil, nowMilliseconds: nowMilliseconds).serialized().count
        guard size <= Self.maximumSize else {
            throw InputRejection(
                .payloadTooLarge,
                "fcm.message is \(size) bytes as sent; the limit is \(Self.maximumSize)"
            )
        }
    }

    /// `android.ttl` for a message sent at `nowMilliseconds`: whole seconds left until
    /// `expiration` (rounded down, never negative, at most 28 days); `"0s"` for expiration 0.
    public static func ttl(expiration: Int64, nowMilliseconds: Int64) -> String {
        guard expiration > 0 else { return "0s" }
        let (product, overflow) = expiration.multipliedReportingOverflow(by: 1000)
        let leftMilliseconds = overflow ? Int64.max : product - nowMilliseconds
        let seconds = min(max(leftMilliseconds / 1000, 0), maximumTTLSeconds)
        return "\(seconds)s"
    }

    /// The `message` object as sent at `nowMilliseconds` to `target` (nil: without a target).
    public func messageObject(target: FCMTarget?, nowMilliseconds: Int64) -> JSONValue {
        var filled: [JSONValue.Member] = []
        filled.reserveCapacity(members.count + 2)
        if let target { filled.append(JSONValue.Member(target.kind, .string(target.value))) }
        var androidSeen = false
        for member in members {
            guard member.name == "android", case .object(let android) = member.value, !androidSeen else {
                filled.append(member)
                continue
            }
            androidSeen = true
            filled.append(JSONValue.Member("android", .object(android + defaults(in: android, nowMilliseconds: nowMilliseconds))))
        }
        if !androidSeen { filled.append(JSONValue.Member("android", .object(defaults(in: [], nowMilliseconds: nowMilliseconds)))) }
        return .object(filled)
    }

    /// The request body, `{"message":{…}}` (with `"validate_only":true` when asked).
    public func body(target: FCMTarget, nowMilliseconds: Int64, validateOnly: Bool = false) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(1024)
        output.append(contentsOf: #"{"message":"#.utf8)
        messageObject(target: target, nowMilliseconds: nowMilliseconds).write(to: &output)
        if validateOnly { output.append(contentsOf: #","validate_only":true"#.utf8) }
        output.append(UInt8(ascii: "}"))
        return output
    }

    /// Herald's `android` members that `android` does not set.
    private func defaults(in android: [JSONValue.Member], nowMilliseconds: Int64) -> [JSONValue.Member] {
        var added: [JSONValue.Member] = []
        if !android.contains(where: { FCMMessageValidator.snakeCase($0.name) == "priority" }) {
            added.append(JSONValue.Member("priority", .string(defaultPriority)))
        }
        if let ttlExpiration {
            added.append(JSONValue.Member("ttl", .string(Self.ttl(expiration: ttlExpiration, nowMilliseconds: nowMilliseconds))))
        }
        if let defaultCollapseKey {
            added.append(JSONValue.Member("collapse_key", .string(defaultCollapseKey)))
        }
        return added
    }
}

/// One notification to one Android device: what an FCM client sends.
public struct FCMRequest: Sendable, Hashable {
    /// The app's package: it selects the credential (and so the Firebase project).
    public var package: String
    public var target: FCMTarget
    public var message: FCMMessage
    /// Sends with `"validate_only": true`: FCM checks the message and delivers nothing.
    public var validateOnly: Bool
    /// Where the request queues for an HTTP/2 stream: urgent ones before every bulk one waiting.
    public var precedence: StreamPrecedence

    public init(
        package: String,
        target: FCMTarget,
        message: FCMMessage,
        validateOnly: Bool = false,
        precedence: StreamPrecedence = .urgent
    ) {
        self.package = package
        self.target = target
        self.message = message
        self.validateOnly = validateOnly
        self.precedence = precedence
    }

    /// The event's `expiration` (UNIX seconds; 0 = once); nil when none.
    public var expiration: Int64? { message.expiration }

    /// The JSON body for an attempt made at `nowMilliseconds` (the `ttl` counts from then).
    public func body(nowMilliseconds: Int64) -> [UInt8] {
        message.body(target: target, nowMilliseconds: nowMilliseconds, validateOnly: validateOnly)
    }
}
