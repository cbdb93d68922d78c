import APNSCore
public import PushStores
import Synchronization

/// A ``DeviceTokenStore`` and ``DeliveryLedger`` in memory, following the rules of Herald's
/// PostgreSQL ones: a registration or unregistration counts only when it is newer than what the
/// registry holds; the ledger keeps the first outcome of each (event, target), and a 410's mark
/// is kept with an outcome only when it changed the registry.
public final class InMemoryTokenRegistry: DeviceTokenStore, DeliveryLedger {
    private struct Row {
        var userID: String
        var environment: APNSEnvironment
        var platform: DevicePlatform
        var fcmTarget: FCMTargetKind
        var webPush: WebPushKeys?
        var registeredAt: Timestamp
        var unregisteredAt: Timestamp?
    }

    private let rows = Mutex<[String: Row]>([:])
    /// An outcome's event and target (its kind included): the ledger's key unless one is given.
    private struct LedgerKey: Hashable {
        var event: LedgerEvent
        var target: LedgerTarget
    }

    /// The ledger's key of an outcome.
    private let ledgerKey: @Sendable (LedgerEvent, LedgerTarget) -> AnyHashable
    private let deliveries = Mutex<[AnyHashable: RecordedDelivery]>([:])
    private let writtenBatches = Mutex<[[RecordedDelivery]]>([])

    /// A registry whose ledger keys an outcome by its event and target (its kind included).
    public convenience init() {
        self.init(ledgerKey: { LedgerKey(event: $0, target: $1) })
    }

    /// A registry whose ledger keys an outcome by `ledgerKey`: two outcomes with one key are one
    /// (the first stands), as two rows with one primary key are one to PostgreSQL.
    public init(ledgerKey: @escaping @Sendable (LedgerEvent, LedgerTarget) -> AnyHashable) {
        self.ledgerKey = ledgerKey
    }

    /// Registers `device` for the app `topic` at `time` (as a push.tokens `register` would).
    public func register(_ device: DeviceToken, topic: String, at time: Timestamp = Timestamp(millisecondsSince1970: 1)) {
        let update = TokenRegistryUpdate(
            action: .register,
            userID: device.userID,
            token: device.token,
            topic: topic,
            environment: device.environment,
            timestamp: time,
            platform: device.platform,
            fcmTarget: device.fcmTarget,
            webPush: device.webPush
        )
        _ = apply(newer: update)
    }

    public func activeDevices(apnsTopic: String?, fcmPackage: String?, webPushApp: String?, userIDs: [String]) async throws
        -> [String: [DeviceToken]]
    {
        let users = Set(userIDs)
        return rows.withLock { rows in
            var result: [String: [DeviceToken]] = [:]
            // Only the users' rows are put in order: the registry holds many more.
            for (key, row) in rows.filter({ users.contains($0.value.userID) }).sorted(by: { $0.key < $1.key }) where row.unregisteredAt == nil {
                let parts = key.split(separator: "|")
                let topic = String(parts[0])
                let app =
                    switch row.platform {
                    case .apns: apnsTopic
                    case .fcm: fcmPackage
                    case .webpush: webPushApp
                    }
                guard topic == app else { continue }
                result[row.userID, default: []].append(
                    DeviceToken(
                        userID: row.userID, token: String(parts.dropFirst().joined(separator: "|")), environment: row.environment,
                        platform: row.platform, fcmTarget: row.fcmTarget, webPush: row.webPush)
                )
            }
            return result
        }
    }

    @discardableResult
    public func apply(_ update: TokenRegistryUpdate) async throws -> Bool {
        apply(newer: update)
    }

    public func markUnregistered(topic: String, token: String, at time: Timestamp) async throws -> Bool {
        unregister(topic: topic, token: token, at: time)
    }

    public func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [LedgerTarget: RecordedDelivery]] {
        deliveries.withLock { deliveries in
            var result: [LedgerEvent: [LedgerTarget: RecordedDelivery]] = [:]
            for delivery in deliveries.values where events.contains(delivery.event) {
                result[delivery.event, default: [:]][delivery.target] = delivery
            }
            return result
        }
    }

    public func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        writtenBatches.withLock { $0.append(batch.map(\.delivery)) }
        return batch.map { delivery, mark in
            var stored = delivery
            if let mark, unregister(topic: mark.topic, token: mark.token, at: mark.at) {
                // The outcome keeps the mark's timestamp: it unregistered the token.
            } else {
                stored.unregisteredAtMilliseconds = nil
            }
            return deliveries.withLock { deliveries in
                let key = ledgerKey(delivery.event, delivery.target)
                if let existing = deliveries[key] { return existing }
                deliveries[key] = stored
                return stored
            }
        }
    }

    /// Outcomes the ledger holds.
    public var recordedCount: Int { deliveries.withLock { $0.count } }

    /// Every batch the ledger was asked to write, oldest first.
    public var recordedBatches: [[RecordedDelivery]] { writtenBatches.withLock { $0 } }

    private func apply(newer update: TokenRegistryUpdate) -> Bool {
        switch update.action {
        case .register:
            return rows.withLock { rows in
                let key = "\(update.topic)|\(update.token)"
                if let row = rows[key], !(update.timestamp > row.registeredAt && (row.unregisteredAt.map { update.timestamp > $0 } ?? true)) {
                    return false
                }
                rows[key] = Row(
                    userID: update.userID ?? "",
                    environment: update.environment,
                    platform: update.platform,
                    fcmTarget: update.fcmTarget,
                    webPush: update.webPush,
                    registeredAt: update.timestamp
                )
                return true
            }
        case .unregister:
            return unregister(topic: update.topic, token: update.token, at: update.timestamp)
        }
    }

    private func unregister(topic: String, token: String, at time: Timestamp) -> Bool {
        rows.withLock { rows in
            let key = "\(topic)|\(token)"
            guard var row = rows[key], time > row.registeredAt, row.unregisteredAt.map({ time > $0 }) ?? true else { return false }
            row.unregisteredAt = time
            rows[key] = row
            return true
        }
    }
}
