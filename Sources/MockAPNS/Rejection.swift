/// The APNs error answers the mock gives, each with Apple's status code and `reason` string, as
/// Apple lists them: the device requests' in "Handling notification responses from APNs"
/// (https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns,
/// tables of status codes and of `reason` values), the channel ones (`MissingChannelId`,
/// `BadChannelId`, `ChannelNotRegistered`, `CannotCreateChannelConfig`, `MissingPushType`) in
/// "Sending channel management requests to APNs"
/// (https://developer.apple.com/documentation/usernotifications/sending-channel-management-requests-to-apns)
/// and "Sending broadcast push notification requests to APNs"
/// (https://developer.apple.com/documentation/usernotifications/sending-broadcast-push-notification-requests-to-apns).
enum Rejection: String, Sendable {
    case badCollapseId = "BadCollapseId"
    case badDeviceToken = "BadDeviceToken"
    case badExpirationDate = "BadExpirationDate"
    case badMessageId = "BadMessageId"
    case badPriority = "BadPriority"
    case duplicateHeaders = "DuplicateHeaders"
    case invalidPushType = "InvalidPushType"
    case missingDeviceToken = "MissingDeviceToken"
    case missingTopic = "MissingTopic"
    case payloadEmpty = "PayloadEmpty"
    case expiredProviderToken = "ExpiredProviderToken"
    case invalidProviderToken = "InvalidProviderToken"
    case missingProviderToken = "MissingProviderToken"
    case badPath = "BadPath"
    case methodNotAllowed = "MethodNotAllowed"
    case unregistered = "Unregistered"
    case payloadTooLarge = "PayloadTooLarge"
    case tooManyRequests = "TooManyRequests"
    case internalServerError = "InternalServerError"
    case serviceUnavailable = "ServiceUnavailable"
    case missingChannelId = "MissingChannelId"
    case badChannelId = "BadChannelId"
    case channelNotRegistered = "ChannelNotRegistered"
    case cannotCreateChannelConfig = "CannotCreateChannelConfig"
    case missingPushType = "MissingPushType"

    /// The HTTP status APNs sends with this reason.
    var status: Int {
        switch self {
        case .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority,
            .duplicateHeaders, .invalidPushType, .missingDeviceToken, .missingTopic, .payloadEmpty,
            .missingChannelId, .badChannelId, .channelNotRegistered, .cannotCreateChannelConfig, .missingPushType:
            return 400
        case .expiredProviderToken, .invalidProviderToken, .missingProviderToken:
            return 403
        case .badPath:
            return 404
        case .methodNotAllowed:
            return 405
        case .unregistered:
            return 410
        case .payloadTooLarge:
            return 413
        case .tooManyRequests:
            return 429
        case .internalServerError:
            return 500
        case .serviceUnavailable:
            return 503
        }
    }
}
