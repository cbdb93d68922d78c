/// The `reason` strings of Apple's provider API.
///
/// A struct with a static member per reason Apple documents, not an enum: a reason Apple adds
/// later is a value like any other (its string kept), and a new static member in a later version
/// of this library breaks no caller's `switch`, which has a `default` anyway. Compare with `==`
/// or match in a `switch` (`case .unregistered:`).
public struct APNSReason: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    /// Apple's spelling of the reason.
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// Apple's reason string, known to this version or not.
    public init(_ string: String) {
        self.init(rawValue: string)
    }

    public var description: String { rawValue }

    /// Whether the reason is one this version of Herald names (a static member).
    public var isKnown: Bool { Self.documented.contains(self) }

    public static let badCollapseId = APNSReason(rawValue: "BadCollapseId")
    public static let badDeviceToken = APNSReason(rawValue: "BadDeviceToken")
    public static let badExpirationDate = APNSReason(rawValue: "BadExpirationDate")
    public static let badMessageId = APNSReason(rawValue: "BadMessageId")
    public static let badPriority = APNSReason(rawValue: "BadPriority")
    public static let badTopic = APNSReason(rawValue: "BadTopic")
    public static let deviceTokenNotForTopic = APNSReason(rawValue: "DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNSReason(rawValue: "DuplicateHeaders")
    public static let idleTimeout = APNSReason(rawValue: "IdleTimeout")
    public static let invalidPushType = APNSReason(rawValue: "InvalidPushType")
    public static let missingDeviceToken = APNSReason(rawValue: "MissingDeviceToken")
    public static let missingTopic = APNSReason(rawValue: "MissingTopic")
    public static let payloadEmpty = APNSReason(rawValue: "PayloadEmpty")
    public static let topicDisallowed = APNSReason(rawValue: "TopicDisallowed")
    public static let badCertificate = APNSReason(rawValue: "BadCertificate")
    public static let badCertificateEnvironment = APNSReason(rawValue: "BadCertificateEnvironment")
    public static let expiredProviderToken = APNSReason(rawValue: "ExpiredProviderToken")
    public static let forbidden = APNSReason(rawValue: "Forbidden")
    public static let invalidProviderToken = APNSReason(rawValue: "InvalidProviderToken")
    public static let missingProviderToken = APNSReason(rawValue: "MissingProviderToken")
    public static let badEnvironmentKeyInToken = APNSReason(rawValue: "BadEnvironmentKeyInToken")
    public static let badEnvironmentKeyIdInToken = APNSReason(rawValue: "BadEnvironmentKeyIdInToken")
    public static let unrelatedKeyIdInToken = APNSReason(rawValue: "UnrelatedKeyIdInToken")
    public static let badPath = APNSReason(rawValue: "BadPath")
    public static let methodNotAllowed = APNSReason(rawValue: "MethodNotAllowed")
    public static let unregistered = APNSReason(rawValue: "Unregistered")
    public static let expiredToken = APNSReason(rawValue: "ExpiredToken")
    public static let payloadTooLarge = APNSReason(rawValue: "PayloadTooLarge")
    public static let tooManyProviderTokenUpdates = APNSReason(rawValue: "TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNSReason(rawValue: "TooManyRequests")
    public static let internalServerError = APNSReason(rawValue: "InternalServerError")
    public static let serviceUnavailable = APNSReason(rawValue: "ServiceUnavailable")
    public static let shutdown = APNSReason(rawValue: "Shutdown")
    public static let missingChannelId = APNSReason(rawValue: "MissingChannelId")
    public static let badChannelId = APNSReason(rawValue: "BadChannelId")
    public static let channelNotRegistered = APNSReason(rawValue: "ChannelNotRegistered")
    public static let cannotCreateChannelConfig = APNSReason(rawValue: "CannotCreateChannelConfig")
    public static let missingPushType = APNSReason(rawValue: "MissingPushType")

    /// Every reason above.
    static let documented: Set<APNSReason> = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
        .expiredProviderToken, .forbidden, .invalidProviderToken, .missingProviderToken,
        .badEnvironmentKeyInToken, .badEnvironmentKeyIdInToken, .unrelatedKeyIdInToken, .badPath,
        .methodNotAllowed, .unregistered, .expiredToken, .payloadTooLarge, .tooManyProviderTokenUpdates,
        .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown, .missingChannelId,
        .badChannelId, .channelNotRegistered, .cannotCreateChannelConfig, .missingPushType,
    ]
}
