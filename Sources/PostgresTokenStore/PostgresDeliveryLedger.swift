package import DeviceTokenStore
package import Foundation
import Logging
import PostgresNIO

extension PostgresDeviceTokenStore: DeliveryLedger {
    package func recordedDeliveries(eventIDs: [String]) async throws -> [String: [String: RecordedDelivery]] {
        guard !eventIDs.isEmpty else { return [:] }
        var deliveries: [String: [String: RecordedDelivery]] = [:]
        let rows = try await RecordedDeliveriesStatement(eventIDs: eventIDs).executeUnnamed { try await client.query($0, logger: logger) }
        for try await (eventID, token, topic, userID, result, unregisteredEvent) in rows {
            deliveries[eventID, default: [:]][token] = RecordedDelivery(
                row: (eventID, token, topic, userID, result, unregisteredEvent)
            )
        }
        return deliveries
    }

    /// One prepared statement records the whole batch, so without registry marks it is one
    /// round trip and no transaction: the batch sits between APNs' answers and their results'
    /// publication, and its latency is the window in which a crash repeats a push. With marks,
    /// the marks and the statement share one transaction.
    package func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        // One row per (event, token): the first outcome given for it stands for every copy.
        var rows: [RecordedDelivery] = []
        var rowOfKey: [DeliveryKey: Int] = [:]
        let rowOfEntry = batch.map { entry in
            if let row = rowOfKey[DeliveryKey(entry.delivery)] { return row }
            var row = entry.delivery
            // Kept only when a mark of this (event, token) changes the registry row (below).
            row.unregisteredEvent = nil
            rows.append(row)
            rowOfKey[DeliveryKey(row)] = rows.count - 1
            return rows.count - 1
        }
        guard !rows.isEmpty else { return [] }
        guard batch.contains(where: { $0.mark != nil }) else {
            let standing = try await Self.standing(rows, RecordDeliveriesStatement(rows).executeUnnamed { try await client.query($0, logger: self.logger) })
            return rowOfEntry.map { standing[$0] }
        }
        let logger = self.logger
        let standing = try await client.withTransaction(logger: logger) { connection in
            // Tokens are locked in one order, so two instances marking the same tokens cannot deadlock.
            let marks = batch.indices.compactMap { index in batch[index].mark.map { (index, $0) } }
                .sorted { ($0.1.topic, $0.1.token) < ($1.1.topic, $1.1.token) }
            for (index, mark) in marks {
                let marked = try await Self.markUnregistered(
                    topic: mark.topic,
                    token: mark.token,
                    at: mark.at,
                    on: connection,
                    logger: logger
                )
                if marked { rows[rowOfEntry[index]].unregisteredEvent = batch[index].delivery.unregisteredEvent }
            }
            return try await Self.standing(rows, RecordDeliveriesStatement(rows).executeUnnamed { try await connection.query($0, logger: logger) })
        }
        return rowOfEntry.map { standing[$0] }
    }

    /// The outcome that stands for each of `rows`, in order, from what ``RecordDeliveriesStatement``
    /// returned for them.
    ///
    /// An outcome another transaction commits while the statement runs is neither inserted nor
    /// seen by it: that throws, and the caller's retry finds the outcome.
    private static func standing(
        _ rows: [RecordedDelivery],
        _ returned: AsyncThrowingMapSequence<PostgresRowSequence, RecordDeliveriesStatement.Row>
    ) async throws -> [RecordedDelivery] {
        var inserted = Set<DeliveryKey>()
        var recordedBefore: [DeliveryKey: RecordedDelivery] = [:]
        for try await (key, earlier) in returned {
            if let earlier {
                recordedBefore[key] = earlier
            } else {
                inserted.insert(key)
            }
        }
        return try rows.map { row in
            if let earlier = recordedBefore[DeliveryKey(row)] { return earlier }
            guard inserted.contains(DeliveryKey(row)) else {
                throw PostgresLedgerError(detail: "no outcome for \(row.eventID) after recording it")
            }
            return row
        }
    }

    package func pruneDeliveries(recordedBefore date: Date) async throws -> Int {
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

/// Inserts each outcome unless its (event, token) has one. Returns the key of each inserted row
/// (with no outcome: the one given stands) and each outcome recorded earlier, in full.
struct RecordDeliveriesStatement: PostgresPreparedStatement {
    static let sql = """
        WITH batch AS (
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
                AS b(event_id, token, topic, user_id, result, unregistered_event)
        ), inserted AS (
            INSERT INTO push.deliveries (event_id, token, topic, user_id, result, unregistered_event)
            SELECT event_id, token, topic, user_id, result, NULLIF(unregistered_event, '') FROM batch
            ON CONFLICT (event_id, token) DO NOTHING
            RETURNING event_id, token
        )
        SELECT event_id, token, NULL, NULL, NULL, NULL FROM inserted
        UNION ALL
        SELECT d.event_id, d.token, d.topic, d.user_id, d.result, d.unregistered_event
        FROM push.deliveries AS d JOIN batch AS b ON d.event_id = b.event_id AND d.token = b.token
        WHERE NOT EXISTS (SELECT 1 FROM inserted AS i WHERE i.event_id = b.event_id AND i.token = b.token)
        """
    /// The row's key, and the outcome recorded earlier (nil for a row this statement inserted).
    typealias Row = (DeliveryKey, RecordedDelivery?)

    var deliveries: [RecordedDelivery]

    init(_ deliveries: [RecordedDelivery]) {
        self.deliveries = deliveries
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.append(deliveries.map(\.eventID))
        bindings.append(deliveries.map(\.token))
        bindings.append(deliveries.map(\.topic))
        bindings.append(deliveries.map(\.userID))
        bindings.append(deliveries.map { String(decoding: $0.result, as: UTF8.self) })
        // postgres-nio binds no arrays of optionals: a missing event travels as '' (an event is
        // a JSON object, never empty).
        bindings.append(deliveries.map { $0.unregisteredEvent.map { String(decoding: $0, as: UTF8.self) } ?? "" })
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let (eventID, token, topic, userID, result, unregisteredEvent) = try row.decode(
            (String, String, String?, String?, String?, String?).self
        )
        let key = DeliveryKey(eventID: eventID, token: token)
        guard let topic, let userID, let result else { return (key, nil) }
        return (key, RecordedDelivery(row: (eventID, token, topic, userID, result, unregisteredEvent)))
    }
}

extension RecordedDelivery {
    /// An outcome from a `push.deliveries` row: event ID, token, topic, user ID, result and
    /// unregistered event, the JSON columns as text.
    fileprivate init(row: (String, String, String, String, String, String?)) {
        self.init(
            eventID: row.0,
            token: row.1,
            topic: row.2,
            userID: row.3,
            result: Array(row.4.utf8),
            unregisteredEvent: row.5.map { Array($0.utf8) }
        )
    }
}

/// A delivery-ledger row's primary key.
struct DeliveryKey: Hashable, Sendable {
    var eventID: String
    var token: String

    init(eventID: String, token: String) {
        self.eventID = eventID
        self.token = token
    }

    init(_ delivery: RecordedDelivery) {
        self.init(eventID: delivery.eventID, token: delivery.token)
    }
}

/// The ledger statement did not return an outcome it was given (one that another transaction
/// committed while it ran); a retry finds it.
struct PostgresLedgerError: Error, CustomStringConvertible {
    var detail: String
    var description: String { "delivery ledger: \(detail)" }
}
