import JSONCore
public import PushCore
import APNSCore
public import PushStores
import FCMCore

extension TokenRegistryUpdate {
    /// Validates a push.tokens value against the contract and normalises its token.
    public init(json value: [UInt8]?) throws(InputRejection) {
        let fields = FieldReader(object: try JSONObjectDecoder.decode(value))
        let actionText = try fields.string("action", bytes: 1...32, required: true)!
        guard let action = Action(rawValue: actionText) else {
            throw InputRejection(.schemaViolation, "action must be register or unregister")
        }
        let userID = try fields.string("user_id", bytes: 1...256, required: action == .register)
        // A string that is not a token is `invalid_token`, whatever its length; a missing or
        // non-string token is a schema violation.
        guard case .string(let rawToken)? = fields.object["token"] else {
            throw InputRejection(.schemaViolation, "token is required and must be a string")
        }
        let topic = try fields.string("topic", bytes: 1...255, required: true)!
        let environment = try fields.environment() ?? .production
        let timestampText = try fields.string("timestamp", bytes: 1...64, required: true)!
        guard let timestamp = RFC3339.parse(timestampText) else {
            throw InputRejection(.schemaViolation, "timestamp must be RFC 3339 with Z or an offset")
        }
        let platformText = try fields.string("platform", bytes: 1...16, required: false) ?? DevicePlatform.apns.rawValue
        guard let platform = DevicePlatform(rawValue: platformText) else {
            throw InputRejection(.schemaViolation, "platform must be apns or fcm")
        }
        let targetText = try fields.string("fcm_target", bytes: 1...16, required: false)
        switch platform {
        case .apns:
            guard targetText == nil else { throw InputRejection(.schemaViolation, "fcm_target is for platform fcm only") }
            self.init(
                action: action,
                userID: userID,
                token: try DeviceTokenText.normalize(rawToken),
                topic: topic,
                environment: environment,
                timestamp: timestamp
            )
        case .fcm:
            guard environment == .production else { throw InputRejection(.schemaViolation, "an FCM device's environment is production") }
            // Kept exactly as the app got it: never lowercased, never checked by pattern.
            let target = try FCMTarget(registration: rawToken, kind: targetText)
            self.init(
                action: action,
                userID: userID,
                token: target.value,
                topic: topic,
                environment: .production,
                timestamp: timestamp,
                platform: .fcm,
                fcmTarget: FCMTargetKind(rawValue: target.kind) ?? .token
            )
        }
    }
}
