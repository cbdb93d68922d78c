public import APNSCore

/// The push service a device is reached through.
public enum DevicePlatform: String, Sendable, Hashable, CaseIterable {
    /// Apple Push Notification service: iPhones, iPads, Macs and watches.
    case apns
    /// Firebase Cloud Messaging (HTTP v1): Android devices.
    case fcm
    /// Standard Web Push (RFC 8030): browsers and installed web apps, Safari included.
    case webpush
}

/// What a browser subscription needs beside its endpoint (the registry's `token`): the keys its
/// messages are encrypted to, as base64url text, and the VAPID key it was made with.
public struct WebPushKeys: Sendable, Hashable {
    /// The browser's P-256 public key (`keys.p256dh`).
    public var p256dh: String
    /// Its 16-byte authentication secret (`keys.auth`).
    public var auth: String
    /// The application server key (VAPID public key, base64url) the subscription was made with;
    /// nil: the app's current key.
    public var vapidPublicKey: String?

    public init(p256dh: String, auth: String, vapidPublicKey: String? = nil) {
        self.p256dh = p256dh
        self.auth = auth
        self.vapidPublicKey = vapidPublicKey
    }
}

/// What an FCM device's string is: a registration token (sent as `message.token`) or a
/// Firebase Installation ID (sent as `message.fid`).
public enum FCMTargetKind: String, Sendable, Hashable {
    case token
    case fid
}

/// An active device of a user for one app.
public struct DeviceToken: Sendable, Hashable {
    public var userID: String
    /// APNs: lowercase hex. FCM: the registration token or Installation ID exactly as the app
    /// got it. Web push: the subscription's endpoint.
    public var token: String
    /// APNs' environment; always production for FCM and web push.
    public var environment: APNSEnvironment
    public var platform: DevicePlatform
    /// For FCM: how `token` is addressed (ignored for the others).
    public var fcmTarget: FCMTargetKind
    /// For web push: the subscription's keys (nil for the others, and for a row without them).
    public var webPush: WebPushKeys?

    public init(
        userID: String,
        token: String,
        environment: APNSEnvironment,
        platform: DevicePlatform = .apns,
        fcmTarget: FCMTargetKind = .token,
        webPush: WebPushKeys? = nil
    ) {
        self.userID = userID
        self.token = token
        self.environment = environment
        self.platform = platform
        self.fcmTarget = fcmTarget
        self.webPush = webPush
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
    /// APNs: lowercase hex. FCM: exactly as the app got it.
    public var token: String
    /// APNs: the bundle ID. FCM: the Android package name.
    public var topic: String
    public var environment: APNSEnvironment
    /// When the app registered or unregistered the token.
    public var timestamp: Timestamp
    public var platform: DevicePlatform
    /// For FCM: how `token` is addressed.
    public var fcmTarget: FCMTargetKind
    /// For a web push registration: the subscription's keys.
    public var webPush: WebPushKeys?

    public init(
        action: Action,
        userID: String?,
        token: String,
        topic: String,
        environment: APNSEnvironment,
        timestamp: Timestamp,
        platform: DevicePlatform = .apns,
        fcmTarget: FCMTargetKind = .token,
        webPush: WebPushKeys? = nil
    ) {
        self.webPush = webPush
        self.action = action
        self.userID = userID
        self.token = token
        self.topic = topic
        self.environment = environment
        self.timestamp = timestamp
        self.platform = platform
        self.fcmTarget = fcmTarget
    }
}

/// The device-token registry the pipeline reads and maintains.
///
/// Every write follows the ordering rule of the contract: an update with time t applies only if
/// t is later than the row's `registered_at` and later than its `unregistered_at` when set.
public protocol DeviceTokenStore: Sendable {
    /// The active devices of `userIDs`, by user ID, in one round trip: APNs devices under
    /// `apnsTopic` (the bundle ID), FCM devices under `fcmPackage` (the Android package) and
    /// browser subscriptions under `webPushApp`; a nil one looks up no device of that platform.
    func activeDevices(apnsTopic: String?, fcmPackage: String?, webPushApp: String?, userIDs: [String]) async throws -> [String: [DeviceToken]]

    /// A poll batch's two lookups: ``activeDevices(apnsTopic:fcmPackage:webPushApp:userIDs:)`` and
    /// `ledger`'s ``DeliveryLedger/recordedDeliveries(of:)`` for `events`. A store that holds
    /// `ledger` too answers both in one round trip; the default asks each, at once.
    func activeDevicesAndRecordedDeliveries(
        apnsTopic: String?,
        fcmPackage: String?,
        webPushApp: String?,
        userIDs: [String],
        events: [LedgerEvent],
        ledger: any DeliveryLedger
    ) async throws -> DevicesAndRecordedDeliveries

    /// Applies a push.tokens update; returns whether it changed the registry.
    @discardableResult
    func apply(_ update: TokenRegistryUpdate) async throws -> Bool

    /// Marks a token unregistered after APNs answered 410 with timestamp `at`; returns whether
    /// the row was marked (false when it was registered again after `at`, or is unknown).
    func markUnregistered(topic: String, token: String, at: Timestamp) async throws -> Bool

    /// Classifies an error one of this store's calls (or its ledger's) threw, so the pipeline
    /// retries a transient failure quietly and reports a permanent one.
    func failure(of error: any Error) -> StoreFailure
}

/// What a failed registry or ledger call means for retrying it.
public struct StoreFailure: Sendable, Hashable {
    /// Needs an operator (a missing table, a revoked grant, a violated constraint): retrying soon
    /// cannot help, but a fix (a migration applied, a grant given) should resume the work.
    public var isPermanent: Bool
    /// A short name of the cause from a bounded set (PostgreSQL's SQLSTATE, or `connection`),
    /// for the log, the metric and the readiness condition.
    public var cause: String

    public init(isPermanent: Bool, cause: String) {
        self.isPermanent = isPermanent
        self.cause = cause
    }

    /// A failure that clears by itself (connection lost, time-out, server restarting).
    public static func transient(_ cause: String) -> StoreFailure {
        StoreFailure(isPermanent: false, cause: cause)
    }
}

/// What a poll batch's lookups found: its users' devices by user ID, and its events' recorded
/// outcomes by event and then target.
public struct DevicesAndRecordedDeliveries: Sendable {
    public var devices: [String: [DeviceToken]]
    public var recorded: [LedgerEvent: [LedgerTarget: RecordedDelivery]]

    public init(devices: [String: [DeviceToken]], recorded: [LedgerEvent: [LedgerTarget: RecordedDelivery]]) {
        self.devices = devices
        self.recorded = recorded
    }
}

extension DeviceTokenStore {
    public func activeDevicesAndRecordedDeliveries(
        apnsTopic: String?,
        fcmPackage: String?,
        webPushApp: String?,
        userIDs: [String],
        events: [LedgerEvent],
        ledger: any DeliveryLedger
    ) async throws -> DevicesAndRecordedDeliveries {
        async let recorded = ledger.recordedDeliveries(of: events)
        let devices = try await activeDevices(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs)
        return DevicesAndRecordedDeliveries(devices: devices, recorded: try await recorded)
    }

    /// ``activeDevices(apnsTopic:fcmPackage:webPushApp:userIDs:)`` of phones only.
    public func activeDevices(apnsTopic: String?, fcmPackage: String?, userIDs: [String]) async throws -> [String: [DeviceToken]] {
        try await activeDevices(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: nil, userIDs: userIDs)
    }

    /// ``activeDevicesAndRecordedDeliveries(apnsTopic:fcmPackage:webPushApp:userIDs:events:ledger:)`` of phones only.
    public func activeDevicesAndRecordedDeliveries(
        apnsTopic: String?,
        fcmPackage: String?,
        userIDs: [String],
        events: [LedgerEvent],
        ledger: any DeliveryLedger
    ) async throws -> DevicesAndRecordedDeliveries {
        try await activeDevicesAndRecordedDeliveries(
            apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: nil, userIDs: userIDs, events: events, ledger: ledger)
    }

    /// The active APNs tokens of `userIDs` for `topic`, optionally of one environment, by user ID.
    public func activeTokens(topic: String, userIDs: [String], environment: APNSEnvironment?) async throws -> [String: [DeviceToken]] {
        let devices = try await activeDevices(apnsTopic: topic, fcmPackage: nil, userIDs: userIDs)
        guard let environment else { return devices }
        return devices.compactMapValues { found in
            let kept = found.filter { $0.environment == environment }
            return kept.isEmpty ? nil : kept
        }
    }

    /// Classifies an error this store threw; a store that cannot tell calls every error transient.
    public func failure(of error: any Error) -> StoreFailure {
        .transient("unknown")
    }
}
