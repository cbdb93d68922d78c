public import Foundation
import Logging
import PostgresNIO

extension PostgresDeviceTokenStore: DeliveryLedger {
    public func recordedDeliveries(eventIDs: [String]) async throws -> [String: [String: RecordedDelivery]] {
        guard !eventIDs.isEmpty else { return [:] }
        var deliveries: [String: [String: RecordedDelivery]] = [:]
        let rows = try await client.execute(RecordedDeliveriesStatement(eventIDs: eventIDs), logger: logger)
        for try await (eventID, token, topic, userID, result, unregisteredEvent) in rows {
            deliveries[eventID, default: [:]][token] = RecordedDelivery(
                eventID: eventID,
                token: token,
                topic: topic,
                userID: userID,
                result: Array(result.utf8),
                unregisteredEvent: unregisteredEvent.map { Array($0.utf8) }
            )
        }
        return deliveries
    }

    /// One statement records the outcome, so without a registry mark it is one round trip and
    /// no transaction: this write sits between APNs' answer and the result's publication, and
    /// its latency is the window in which a crash repeats a push.
    public func record(_ delivery: RecordedDelivery, marking mark: UnregisterMark?) async throws -> RecordedDelivery {
        guard let mark else {
            return try await Self.standing(delivery, client.query(Self.insertOrFetch(delivery, unregisteredEvent: nil), logger: logger))
        }
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            let marked = try await Self.markUnregistered(
                topic: mark.topic,
                token: mark.token,
                at: mark.at,
                on: connection,
                logger: logger
            )
            let query = Self.insertOrFetch(delivery, unregisteredEvent: marked ? delivery.unregisteredEvent : nil)
            return try await Self.standing(delivery, connection.query(query, logger: logger))
        }
    }

    /// Inserts the outcome unless (event, token) has one, and returns the outcome that stands:
    /// the new row, or the one another delivery of the same event recorded first.
    private static func insertOrFetch(_ delivery: RecordedDelivery, unregisteredEvent: [UInt8]?) -> PostgresQuery {
        let result = String(decoding: delivery.result, as: UTF8.self)
        let event = unregisteredEvent.map { String(decoding: $0, as: UTF8.self) }
        return """
            WITH inserted AS (
                INSERT INTO push.deliveries (event_id, token, topic, user_id, result, unregistered_event)
                VALUES (\(delivery.eventID), \(delivery.token), \(delivery.topic), \(delivery.userID), \(result), \(event))
                ON CONFLICT (event_id, token) DO NOTHING
                RETURNING topic, user_id, result, unregistered_event
            )
            SELECT topic, user_id, result, unregistered_event FROM inserted
            UNION ALL
            SELECT topic, user_id, result, unregistered_event FROM push.deliveries
            WHERE event_id = \(delivery.eventID) AND token = \(delivery.token) AND NOT EXISTS (SELECT 1 FROM inserted)
            """
    }

    /// The outcome ``insertOrFetch(_:unregisteredEvent:)`` returned for `delivery`.
    private static func standing(_ delivery: RecordedDelivery, _ rows: PostgresRowSequence) async throws -> RecordedDelivery {
        for try await (topic, userID, result, unregisteredEvent) in rows.decode((String, String, String, String?).self) {
            return RecordedDelivery(
                eventID: delivery.eventID,
                token: delivery.token,
                topic: topic,
                userID: userID,
                result: Array(result.utf8),
                unregisteredEvent: unregisteredEvent.map { Array($0.utf8) }
            )
        }
        throw PostgresLedgerError(detail: "no outcome for \(delivery.eventID) after recording it")
    }

    public func pruneDeliveries(recordedBefore date: Date) async throws -> Int {
        try await deleteInBatches { batchSize in
            """
            WITH deleted AS (
                DELETE FROM push.deliveries WHERE (event_id, token) IN (
                    SELECT event_id, token FROM push.deliveries WHERE recorded_at < \(date) LIMIT \(batchSize))
                RETURNING 1
            )
            SELECT count(*) FROM deleted
            """
        }
    }
}

/// Every recorded outcome of a batch of events, in one round trip.
struct RecordedDeliveriesStatement: PostgresPreparedStatement {
    static let sql = """
        SELECT event_id, token, topic, user_id, result, unregistered_event FROM push.deliveries
        WHERE event_id = ANY($1)
        """
    typealias Row = (String, String, String, String, String, String?)

    var eventIDs: [String]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(eventIDs)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}

/// The ledger found itself in a state its statements rule out.
struct PostgresLedgerError: Error, CustomStringConvertible {
    var detail: String
    var description: String { "delivery ledger: \(detail)" }
}
