public import APNSCore

/// An active device of a user for one app.
public struct DeviceToken: Sendable, Hashable {
    public var userID: String
    /// Lowercase hex.
    public var token: String
    public var environment: APNSEnvironment

    public init(userID: String, token: String, environment: APNSEnvironment) {
        self.userID = userID
        self.token = token
        self.environment = environment
    }
}

/// A change to the registry from push.tokens.
public struct TokenRegistryUpdate: Sendable, Hashable {
    public enum Action: String, Sendable, Hashable {
        case register
        case unregister
    }

    public var action: Action
    /// Required for `register`.
    public var userID: String?
    /// Lowercase hex.
    public var token: String
    public var topic: String
    public var environment: APNSEnvironment
    /// When the app registered or unregistered the token.
    public var timestamp: Timestamp

    public init(
        action: Action,
        userID: String?,
        token: String,
        topic: String,
        environment: APNSEnvironment,
        timestamp: Timestamp
    ) {
        self.action = action
        self.userID = userID
        self.token = token
        self.topic = topic
        self.environment = environment
        self.timestamp = timestamp
    }
}

/// The device-token registry the pipeline reads and maintains.
///
/// Every write follows the ordering rule of the contract: an update with time t applies only if
/// t is later than the row's `registered_at` and later than its `unregistered_at` when set.
public protocol DeviceTokenStore: Sendable {
    /// The active tokens of `userIDs` for `topic`, optionally of one environment, by user ID.
    func activeTokens(
        topic: String,
        userIDs: [String],
        environment: APNSEnvironment?
    ) async throws -> [String: [DeviceToken]]

    /// Applies a push.tokens update; returns whether it changed the registry.
    @discardableResult
    func apply(_ update: TokenRegistryUpdate) async throws -> Bool

    /// Marks a token unregistered after APNs answered 410 with timestamp `at`; returns whether
    /// the row was marked (false when it was registered again after `at`, or is unknown).
    func markUnregistered(topic: String, token: String, at: Timestamp) async throws -> Bool
}
