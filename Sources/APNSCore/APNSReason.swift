/// The `reason` strings of Apple's provider API, as a closed set with an escape hatch so an
/// unknown reason never breaks the caller.
public enum APNSReason: Sendable, Hashable {
    case badCollapseId
    case badDeviceToken
    case badExpirationDate
    case badMessageId
    case badPriority
    case badTopic
    case deviceTokenNotForTopic
    case duplicateHeaders
    case idleTimeout
    case invalidPushType
    case missingDeviceToken
    case missingTopic
    case payloadEmpty
    case topicDisallowed
    case badCertificate
    case badCertificateEnvironment
    case expiredProviderToken
    case forbidden
    case invalidProviderToken
    case missingProviderToken
    case badEnvironmentKeyInToken
    case badEnvironmentKeyIdInToken
    case unrelatedKeyIdInToken
    case badPath
    case methodNotAllowed
    case unregistered
    case expiredToken
    case payloadTooLarge
    case tooManyProviderTokenUpdates
    case tooManyRequests
    case internalServerError
    case serviceUnavailable
    case shutdown
    case missingChannelId
    case badChannelId
    case channelNotRegistered
    case cannotCreateChannelConfig
    case missingPushType
    /// A reason this version of Herald does not know; the original string is kept.
    case unknown(String)

    private static let known: [(String, APNSReason)] = [
        ("BadCollapseId", .badCollapseId), ("BadDeviceToken", .badDeviceToken),
        ("BadExpirationDate", .badExpirationDate), ("BadMessageId", .badMessageId),
        ("BadPriority", .badPriority), ("BadTopic", .badTopic),
        ("DeviceTokenNotForTopic", .deviceTokenNotForTopic), ("DuplicateHeaders", .duplicateHeaders),
        ("IdleTimeout", .idleTimeout), ("InvalidPushType", .invalidPushType),
        ("MissingDeviceToken", .missingDeviceToken), ("MissingTopic", .missingTopic),
        ("PayloadEmpty", .payloadEmpty), ("TopicDisallowed", .topicDisallowed),
        ("BadCertificate", .badCertificate), ("BadCertificateEnvironment", .badCertificateEnvironment),
        ("ExpiredProviderToken", .expiredProviderToken), ("Forbidden", .forbidden),
        ("InvalidProviderToken", .invalidProviderToken), ("MissingProviderToken", .missingProviderToken),
        ("BadEnvironmentKeyInToken", .badEnvironmentKeyInToken),
        ("BadEnvironmentKeyIdInToken", .badEnvironmentKeyIdInToken),
        ("UnrelatedKeyIdInToken", .unrelatedKeyIdInToken), ("BadPath", .badPath),
        ("MethodNotAllowed", .methodNotAllowed), ("Unregistered", .unregistered),
        ("ExpiredToken", .expiredToken), ("PayloadTooLarge", .payloadTooLarge),
        ("TooManyProviderTokenUpdates", .tooManyProviderTokenUpdates),
        ("TooManyRequests", .tooManyRequests), ("InternalServerError", .internalServerError),
        ("ServiceUnavailable", .serviceUnavailable), ("Shutdown", .shutdown),
        ("MissingChannelId", .missingChannelId), ("BadChannelId", .badChannelId),
        ("ChannelNotRegistered", .channelNotRegistered), ("CannotCreateChannelConfig", .cannotCreateChannelConfig),
        ("MissingPushType", .missingPushType),
    ]
    private static let byName = Dictionary(uniqueKeysWithValues: known)

    /// Maps Apple's reason string; anything unrecognised becomes `.unknown`.
    public init(_ string: String) {
        self = Self.byName[string] ?? .unknown(string)
    }

    /// Apple's spelling of the reason.
    public var rawValue: String {
        if case .unknown(let string) = self { return string }
        return Self.known.first { $0.1 == self }!.0
    }
}
