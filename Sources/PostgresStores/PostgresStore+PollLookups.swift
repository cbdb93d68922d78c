package import PushStores
import Foundation
import PostgresNIO

extension PostgresStore {
    /// Both lookups in one statement (``DevicesAndRecordedDeliveriesStatement``) when `ledger`
    /// is this database's: a poll batch makes one round trip where it made two at once, and at
    /// a steady load, where batches are small, a round trip is most of a lookup's cost
    /// (BENCHMARKS.md). Apart, as two statements at once, when `ledger` is another store.
    package func activeDevicesAndRecordedDeliveries(
        apnsTopic: String?,
        fcmPackage: String?,
        webPushApp: String?,
        userIDs: [String],
        events: [LedgerEvent],
        ledger: any DeliveryLedger
    ) async throws -> DevicesAndRecordedDeliveries {
        guard let ownLedger = ledger as? PostgresStore, ownLedger.client === client, !events.isEmpty else {
            async let recorded = ledger.recordedDeliveries(of: events)
            let devices = try await activeDevices(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs)
            return DevicesAndRecordedDeliveries(devices: devices, recorded: try await recorded)
        }
        let statement = DevicesAndRecordedDeliveriesStatement(
            devices: ActiveDevicesStatement(apnsTopic: apnsTopic, fcmPackage: fcmPackage, webPushApp: webPushApp, userIDs: userIDs),
            deliveries: RecordedDeliveriesStatement(events: events)
        )
        var found = DevicesAndRecordedDeliveries(devices: [:], recorded: [:])
        for row in try await rows(of: statement) {
            switch row {
            case .device(let device?): found.devices[device.userID, default: []].append(device)
            case .delivery(let delivery?): found.recorded[delivery.event, default: [:]][delivery.target] = delivery
            case .device(nil), .delivery(nil): continue
            }
        }
        try await addUnpartitionedDeliveries(of: events, to: &found.recorded)
        return found
    }
}

/// ``ActiveDevicesStatement`` and ``RecordedDeliveriesStatement`` as one: `UNION ALL` of the
/// two, each branch planned and pruned as it is alone (LookupPlanTests). Both branches return
/// the ledger's columns (``LedgerRow/selectedColumns``); a device's row leaves the event key
/// NULL and carries its token and user ID in the ledger's token and user columns, its
/// environment, platform and FCM target in the `status`, `reason` and `apns_unique_id` columns,
/// a subscription's keys in `message`.
struct DevicesAndRecordedDeliveriesStatement: PostgresPreparedStatement {
    static let name = "herald_devices_and_recorded_deliveries"
    static let sql = """
        SELECT NULL::uuid, NULL::integer, token, user_id, environment, NULL::boolean, NULL::smallint, platform,
               NULL::smallint, NULL::integer, NULL::bigint, fcm_target, NULL::bigint, \(ActiveDevicesStatement.webPushKeys),
               NULL::smallint
        FROM push.device_tokens
        WHERE \(ActiveDevicesStatement.condition(apnsTopic: "$1", fcmPackage: "$2", userIDs: "$3", webPushApp: "$4"))
        UNION ALL
        SELECT \(LedgerRow.selectedColumns) FROM push.delivery_ledger AS l
        WHERE \(RecordedDeliveriesStatement.condition(firstDay: "$5", eventKeys: "$6", lastDay: "$7"))
        """

    /// A device (nil: an environment or platform Herald does not know), or a recorded outcome
    /// (nil: a row of a day the batch spans that is not its event's).
    enum Row {
        case device(DeviceToken?)
        case delivery(RecordedDelivery?)
    }

    /// A device's row as read: the columns up to `message`, where a subscription's keys are.
    private typealias DeviceColumns = (UUID?, Int32?, String, String, String, Bool?, Int16?, String, Int16?, Int32?, Int64?, String?, Int64?, String?)

    var devices: ActiveDevicesStatement
    var deliveries: RecordedDeliveriesStatement

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 7)
        devices.appendBindings(to: &bindings)
        deliveries.appendBindings(to: &bindings)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        guard try row.decode(UUID?.self) == nil else { return .delivery(try deliveries.delivery(try row.decode(LedgerRow.Columns.self))) }
        let columns = try row.decode(DeviceColumns.self)
        return .device(
            PostgresStore.device(
                userID: columns.3, token: columns.2, environment: columns.4, platform: columns.7, fcmTarget: columns.11, webPushKeys: columns.13))
    }
}
