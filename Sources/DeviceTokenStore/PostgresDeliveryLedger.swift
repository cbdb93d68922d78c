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

    public func record(_ delivery: RecordedDelivery, marking mark: UnregisterMark?) async throws -> RecordedDelivery {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            var unregisteredEvent: [UInt8]?
            if let mark {
                let marked = try await Self.markUnregistered(
                    topic: mark.topic,
                    token: mark.token,
                    at: mark.at,
                    on: connection,
                    logger: logger
                )
                if marked { unregisteredEvent = delivery.unregisteredEvent }
            }
            let result = String(decoding: delivery.result, as: UTF8.self)
            let event = unregisteredEvent.map { String(decoding: $0, as: UTF8.self) }
            let inserted = try await connection.query(
                """
                INSERT INTO push.deliveries (event_id, token, topic, user_id, result, unregistered_event)
                VALUES (\(delivery.eventID), \(delivery.token), \(delivery.topic), \(delivery.userID), \(result), \(event))
                ON CONFLICT (event_id, token) DO NOTHING
                RETURNING 1
                """,
                logger: logger
            ).collect()
            if !inserted.isEmpty {
                return RecordedDelivery(
                    eventID: delivery.eventID,
                    token: delivery.token,
                    topic: delivery.topic,
                    userID: delivery.userID,
                    result: delivery.result,
                    unregisteredEvent: unregisteredEvent
                )
            }
            // Another delivery of the same event recorded first: its outcome stands.
            for try await (topic, userID, existing, existingEvent) in try await connection.query(
                """
                SELECT topic, user_id, result, unregistered_event FROM push.deliveries
                WHERE event_id = \(delivery.eventID) AND token = \(delivery.token)
                """,
                logger: logger
            ).decode((String, String, String, String?).self) {
                return RecordedDelivery(
                    eventID: delivery.eventID,
                    token: delivery.token,
                    topic: topic,
                    userID: userID,
                    result: Array(existing.utf8),
                    unregisteredEvent: existingEvent.map { Array($0.utf8) }
                )
            }
            return delivery
        }
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
