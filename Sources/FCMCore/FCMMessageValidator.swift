public import JSONCore
public import PushCore

/// The contract's rules for an event's `fcm.message` (docs/design.md, "Talking to FCM"), checked
/// at intake so that a message FCM would refuse becomes a dead letter, not a result per device.
///
/// - Members: `notification`, `data`, `android`, `apns`, `webpush` and `fcm_options`; `token`,
///   `topic`, `condition` and `fid` are Herald's to set, anything else is refused.
/// - Every object is checked against the fields FCM's v1 `Message` defines for it, in
///   snake_case or lowerCamelCase (proto3's JSON names, which FCM reads too): FCM answers 400
///   for any other, once per device. Source: https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages
///   (`Message`, `Notification`, `AndroidConfig`, `AndroidNotification`, `ApnsConfig`,
///   `WebpushConfig` and the `FcmOptions` types).
/// - `data`, `android.data` and `webpush.data`: string values only; no key `from` or
///   `message_type`, nor one starting with `google.` or `gcm.notification.`.
/// - `notification`: an object of strings. `apns.headers`, `webpush.headers`: objects of strings.
///   `apns.payload`, `webpush.notification` (the browser's Notification options) and the
///   `fcm_options` objects: objects.
/// - `android.priority`: `normal` or `high` (any case); `android.ttl`: a duration string
///   (`"3.5s"`) of 0..2,419,200 s; `android.collapse_key`, `android.restricted_package_name`:
///   strings; `android.direct_boot_ok`: a boolean.
public enum FCMMessageValidator {
    /// The message members Herald sets per device.
    public static let targetMembers: Set<String> = ["token", "topic", "condition", "fid"]
    /// The message members an event may give.
    public static let allowedMembers: Set<String> = ["notification", "data", "android", "apns", "webpush", "fcm_options"]

    /// The fields of each object of the v1 `Message` that Herald checks, by FCM's type name.
    static let fields: [String: Set<String>] = [
        "Notification": ["title", "body", "image"],
        "FcmOptions": ["analytics_label"],
        "AndroidConfig": [
            "collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options", "direct_boot_ok",
            "bandwidth_constrained_ok", "restricted_satellite_ok",
        ],
        "AndroidNotification": [
            "title", "body", "icon", "color", "sound", "tag", "click_action", "body_loc_key", "body_loc_args", "title_loc_key",
            "title_loc_args", "channel_id", "ticker", "sticky", "event_time", "local_only", "notification_priority", "default_sound",
            "default_vibrate_timings", "default_light_settings", "vibrate_timings", "visibility", "notification_count",
            "light_settings", "image", "bypass_proxy_notification", "proxy",
        ],
        "AndroidFcmOptions": ["analytics_label"],
        "ApnsConfig": ["headers", "payload", "fcm_options", "live_activity_token"],
        "ApnsFcmOptions": ["analytics_label", "image"],
        "WebpushConfig": ["headers", "data", "notification", "fcm_options"],
        "WebpushFcmOptions": ["link", "analytics_label"],
    ]

    /// Throws a `schema_violation` naming the first member that breaks a rule.
    public static func validate(_ members: [JSONValue.Member]) throws(InputRejection) {
        for member in members {
            let path = "fcm.message.\(member.name)"
            if targetMembers.contains(member.name) {
                throw InputRejection(.schemaViolation, "\(path) must not be set: Herald sets the target per device")
            }
            guard allowedMembers.contains(member.name) else {
                throw InputRejection(.schemaViolation, "\(path) is not supported (notification, data, android, fcm_options)")
            }
            switch member.name {
            case "data": try dataMap(member.value, path: path)
            case "notification": try stringObject(member.value, path: path, of: "Notification")
            case "android": try android(member.value, path: path)
            case "apns": try apns(member.value, path: path)
            case "webpush": try webpush(member.value, path: path)
            default: try object(member.value, path: path, of: "FcmOptions")
            }
        }
    }

    /// The snake_case spelling of a field name FCM may read in lowerCamelCase.
    static func snakeCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "_" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }

    /// The members of the object `value` at `path`, each a field of FCM's `type`.
    private static func members(_ value: JSONValue, path: String, of type: String) throws(InputRejection) -> [JSONValue.Member] {
        guard case .object(let members) = value else { throw InputRejection(.schemaViolation, "\(path) must be a JSON object") }
        let known = fields[type] ?? []
        for member in members where !known.contains(snakeCase(member.name)) {
            throw InputRejection(.schemaViolation, "\(path).\(String(member.name.prefix(64))) is not a field of FCM's \(type)")
        }
        return members
    }

    private static func apns(_ value: JSONValue, path: String) throws(InputRejection) {
        for member in try members(value, path: path, of: "ApnsConfig") {
            let memberPath = "\(path).\(member.name)"
            switch snakeCase(member.name) {
            case "headers": try stringObject(member.value, path: memberPath, of: nil)
            case "fcm_options": try object(member.value, path: memberPath, of: "ApnsFcmOptions")
            case "live_activity_token":
                guard case .string = member.value else { throw InputRejection(.schemaViolation, "\(memberPath) must be a string") }
            default: try object(member.value, path: memberPath, of: nil)
            }
        }
    }

    private static func webpush(_ value: JSONValue, path: String) throws(InputRejection) {
        for member in try members(value, path: path, of: "WebpushConfig") {
            let memberPath = "\(path).\(member.name)"
            switch snakeCase(member.name) {
            case "headers": try stringObject(member.value, path: memberPath, of: nil)
            case "data": try dataMap(member.value, path: memberPath)
            case "fcm_options": try object(member.value, path: memberPath, of: "WebpushFcmOptions")
            default: try object(member.value, path: memberPath, of: nil)
            }
        }
    }

    /// Whether `key` may not be used in a data map.
    public static func isReservedDataKey(_ key: String) -> Bool {
        key == "from" || key == "message_type" || key.hasPrefix("google.") || key.hasPrefix("gcm.notification.")
    }

    /// Whether `text` is a protobuf duration FCM accepts as `android.ttl`: digits, up to nine
    /// fractional digits, `s`, at most 28 days.
    public static func isValidTTL(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, bytes.last == UInt8(ascii: "s") else { return false }
        let number = bytes.dropLast()
        let parts = number.split(separator: UInt8(ascii: "."), maxSplits: 1, omittingEmptySubsequences: false)
        let isDigit = { (byte: UInt8) in byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        guard let whole = parts.first, (1...7).contains(whole.count), whole.allSatisfy(isDigit) else { return false }
        if parts.count == 2 {
            guard (1...9).contains(parts[1].count), parts[1].allSatisfy(isDigit) else { return false }
        }
        guard let seconds = Int64(String(decoding: whole, as: UTF8.self)) else { return false }
        let hasFraction = parts.count == 2 && parts[1].contains { $0 != UInt8(ascii: "0") }
        return seconds < FCMMessage.maximumTTLSeconds || (seconds == FCMMessage.maximumTTLSeconds && !hasFraction)
    }

    /// An object, each member a field of FCM's `type` (nil: any member).
    private static func object(_ value: JSONValue, path: String, of type: String?) throws(InputRejection) {
        guard let type else {
            guard case .object = value else { throw InputRejection(.schemaViolation, "\(path) must be a JSON object") }
            return
        }
        _ = try members(value, path: path, of: type)
    }

    /// An object of strings, each member a field of FCM's `type` (nil: any member).
    private static func stringObject(_ value: JSONValue, path: String, of type: String?) throws(InputRejection) {
        guard case .object(let members) = value else { throw InputRejection(.schemaViolation, "\(path) must be a JSON object") }
        if let type { _ = try Self.members(value, path: path, of: type) }
        for member in members {
            guard case .string = member.value else {
                throw InputRejection(.schemaViolation, "\(path).\(member.name) must be a string")
            }
        }
    }

    private static func dataMap(_ value: JSONValue, path: String) throws(InputRejection) {
        guard case .object(let members) = value else { throw InputRejection(.schemaViolation, "\(path) must be a JSON object") }
        for member in members {
            guard !isReservedDataKey(member.name) else {
                throw InputRejection(.schemaViolation, "\(path) key \(quoted(member.name)) is reserved by FCM")
            }
            guard case .string = member.value else {
                throw InputRejection(.schemaViolation, "\(path).\(member.name) must be a string (FCM data values are strings)")
            }
        }
    }

    private static func android(_ value: JSONValue, path: String) throws(InputRejection) {
        for member in try members(value, path: path, of: "AndroidConfig") {
            let memberPath = "\(path).\(member.name)"
            switch snakeCase(member.name) {
            case "data":
                try dataMap(member.value, path: memberPath)
            case "notification":
                try object(member.value, path: memberPath, of: "AndroidNotification")
            case "fcm_options":
                try object(member.value, path: memberPath, of: "AndroidFcmOptions")
            case "priority":
                guard let text = member.value.stringValue, ["normal", "high"].contains(text.lowercased()) else {
                    throw InputRejection(.schemaViolation, "\(memberPath) must be normal or high")
                }
            case "ttl":
                guard let text = member.value.stringValue, isValidTTL(text) else {
                    throw InputRejection(.schemaViolation, "\(memberPath) must be a duration such as \"3.5s\", 0..2419200 s")
                }
            case "collapse_key", "restricted_package_name":
                guard case .string = member.value else { throw InputRejection(.schemaViolation, "\(memberPath) must be a string") }
            case "direct_boot_ok":
                guard case .bool = member.value else { throw InputRejection(.schemaViolation, "\(memberPath) must be a boolean") }
            default:
                break
            }
        }
    }

    /// A key as a JSON literal, quotes included, cut to 64 bytes for a detail.
    private static func quoted(_ key: String) -> String {
        JSONValue.string(String(key.prefix(64))).serializedText
    }
}

extension JSONValue {
    /// The compact JSON text as a string.
    var serializedText: String { String(decoding: serialized(), as: UTF8.self) }
}
