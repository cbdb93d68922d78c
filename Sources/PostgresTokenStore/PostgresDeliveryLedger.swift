import APNSCore
package import DeviceTokenStore
import Logging
import PostgresNIO
import Synchronization

extension PostgresDeviceTokenStore: DeliveryLedger {
    /// One statement for the partitioned ledger: the batch's days (usually one) bound `day`, which
    /// prunes the lookup to their partitions when it starts, generic plan included, and the
    /// events' keys as an array make each event one probe of that partition's primary key (a
    /// join alone lets the generic plan scan the day's whole index). While `push.deliveries`
    /// (before migration 5) exists, it is read too.
    package func recordedDeliveries(of events: [LedgerEvent]) async throws -> [String: [String: RecordedDelivery]] {
        guard !events.isEmpty else { return [:] }
        var deliveries: [String: [String: RecordedDelivery]] = [:]
        let lookup = RecordedDeliveriesStatement(events: events)
        for try await delivery in try await lookup.executeUnnamed({ try await client.query($0, logger: logger) }) {
            deliveries[delivery.event.eventID, default: [:]][delivery.token] = delivery
        }
        for delivery in try await unpartitionedLedger.recordedDeliveries(of: events, client: client, logger: logger) {
            deliveries[delivery.event.eventID, default: [:]][delivery.token] = deliveries[delivery.event.eventID]?[delivery.token] ?? delivery
        }
        return deliveries
    }

    /// One statement records the whole batch, so without registry marks it is one round trip and
    /// no transaction: the batch sits between APNs' answers and their results' publication, and
    /// its latency is the window in which a crash repeats a push. With marks, the marks and the
    /// statement share one transaction.
    package func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        // One row per (event, token): the first outcome given for it stands for every copy.
        var rows: [RecordedDelivery] = []
        var rowOfKey: [DeliveryKey: Int] = [:]
        let rowOfEntry = batch.map { entry in
            if let row = rowOfKey[DeliveryKey(entry.delivery)] { return row }
            var row = entry.delivery
            // Kept only when a mark of this (event, token) changes the registry row (below).
            row.unregisteredAtMilliseconds = nil
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
                if marked {
                    rows[rowOfEntry[index]].unregisteredAtMilliseconds = batch[index].delivery.unregisteredAtMilliseconds
                }
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
                throw PostgresLedgerError(detail: "no outcome for \(row.event.eventID) after recording it")
            }
            return row
        }
    }
}

/// How a row of `push.delivery_ledger` is written and read; the SQL of both statements shares it.
enum LedgerRow {
    /// The `status` codes, in order from 1 (migration 5).
    static let statusCodes = "ARRAY['delivered', 'unregistered', 'rejected', 'failed', 'expired']"

    /// The row's columns as the statements read them: event ID (from the batch), day, token as
    /// text, user, status text, then the outcome's fields.
    static let selectedColumns = """
        l.day, CASE WHEN l.device THEN encode(l.token, 'hex') ELSE convert_from(l.token, 'UTF8') END,
        l.user_id, (\(statusCodes))[l.status], l.sandbox, l.apns_status, l.reason, l.attempts, l.latency_ms,
        l.completed_at, l.apns_unique_id, l.unregistered_at, l.message
        """

    typealias Columns = (
        String, Int32, String, String, String?, Bool, Int16?, String?, Int16, Int32, Int64, String?, Int64?, String?
    )

    /// Whether a send's `token` is kept as the bytes its text spells (`device`): lowercase hex of
    /// even length, as every device token is; other keys are kept as UTF-8.
    static func isStoredAsBytes(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.count.isMultiple(of: 2)
            && token.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// The delivery of a row read as ``selectedColumns`` after the event ID.
    static func delivery(_ row: PostgresRow) throws -> RecordedDelivery {
        let columns = try row.decode(Columns.self)
        return try delivery(columns)
    }

    static func delivery(_ columns: Columns) throws -> RecordedDelivery {
        let (eventID, day, token, userID, status, sandbox, apnsStatus, reason, attempts, latency, completedAt, uniqueID, unregisteredAt, message) =
            columns
        let outcome: RecordedDelivery.Outcome
        if let message {
            outcome = .message(result: Array(message.utf8), unregisteredEvent: nil)
        } else {
            guard let status = status.flatMap(DeliveryStatus.init(rawValue:)) else {
                throw PostgresLedgerError(detail: "unknown status code for \(eventID)")
            }
            outcome = .send(
                RecordedDelivery.SendOutcome(
                    status: status,
                    environment: sandbox ? .sandbox : .production,
                    apnsStatus: apnsStatus.map(Int.init),
                    reason: reason,
                    attempts: Int(attempts),
                    latencyMilliseconds: Int64(latency),
                    completedAtMilliseconds: completedAt,
                    apnsUniqueID: uniqueID,
                    unregisteredAtMilliseconds: unregisteredAt
                )
            )
        }
        return RecordedDelivery(event: LedgerEvent(eventID: eventID, day: day), token: token, userID: userID, outcome: outcome)
    }
}

/// Every recorded outcome of a batch of events, in one round trip.
struct RecordedDeliveriesStatement: PostgresPreparedStatement {
    static let sql = """
        WITH wanted AS (SELECT e AS event_id, md5(e)::uuid AS event_key FROM unnest($2::text[]) AS e)
        SELECT w.event_id, \(LedgerRow.selectedColumns)
        FROM wanted AS w JOIN push.delivery_ledger AS l ON l.event_key = w.event_key
        WHERE l.day BETWEEN $1 AND $3 AND l.event_key = ANY(ARRAY(SELECT event_key FROM wanted))
        """
    typealias Row = RecordedDelivery

    var events: [LedgerEvent]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(events.lazy.map(\.day).min() ?? 0)
        bindings.append(Array(Set(events.map(\.eventID))))
        bindings.append(events.lazy.map(\.day).max() ?? 0)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try LedgerRow.delivery(row)
    }
}

/// Inserts each outcome unless its (event, token) has one. Returns the key of each inserted row
/// (with no outcome: the one given stands) and each outcome recorded earlier, in full.
///
/// postgres-nio binds no arrays of optionals, so an absent value travels as a sentinel the
/// statement turns into NULL: '' for text (none is empty when present), 0 for `apns_status`,
/// `Int64.min` for `unregistered_at`.
struct RecordDeliveriesStatement: PostgresPreparedStatement {
    static let sql = """
        WITH batch AS (
            SELECT md5(b.event_id)::uuid AS event_key, b.*
            FROM unnest($1::text[], $2::integer[], $3::text[], $4::boolean[], $5::text[], $6::text[], $7::boolean[],
                        $8::smallint[], $9::text[], $10::smallint[], $11::integer[], $12::bigint[], $13::text[],
                        $14::bigint[], $15::text[])
                AS b(event_id, day, token_text, device, user_id, status, sandbox, apns_status, reason, attempts,
                     latency_ms, completed_at, apns_unique_id, unregistered_at, message)
        ), keyed AS (
            SELECT batch.*,
                CASE WHEN device THEN decode(token_text, 'hex') ELSE convert_to(token_text, 'UTF8') END AS token
            FROM batch
        ), inserted AS (
            INSERT INTO push.delivery_ledger (event_key, day, token, device, user_id, status, sandbox, apns_status,
                reason, attempts, latency_ms, completed_at, apns_unique_id, unregistered_at, message)
            SELECT event_key, day, token, device, user_id,
                coalesce(array_position(\(LedgerRow.statusCodes), status), 0), sandbox,
                NULLIF(apns_status, 0), NULLIF(reason, ''), attempts, latency_ms, completed_at,
                NULLIF(apns_unique_id, ''), NULLIF(unregistered_at, -9223372036854775808), NULLIF(message, '')
            FROM keyed
            ON CONFLICT (event_key, token, day) DO NOTHING
            RETURNING event_key, token, day
        )
        SELECT false, k.event_id, k.day, k.token_text, '', NULL, false, NULL::smallint, NULL, 0::smallint, 0, 0::bigint,
            NULL, NULL::bigint, NULL
        FROM inserted AS i JOIN keyed AS k USING (event_key, token, day)
        UNION ALL
        SELECT true, k.event_id, \(LedgerRow.selectedColumns)
        FROM push.delivery_ledger AS l JOIN keyed AS k USING (event_key, token, day)
        WHERE l.day BETWEEN $16 AND $17 AND l.event_key = ANY(ARRAY(SELECT event_key FROM keyed))
          AND NOT EXISTS (SELECT 1 FROM inserted AS i WHERE (i.event_key, i.token, i.day) = (k.event_key, k.token, k.day))
        """
    /// The row's key, and the outcome recorded earlier (nil for a row this statement inserted).
    typealias Row = (DeliveryKey, RecordedDelivery?)

    var deliveries: [RecordedDelivery]

    init(_ deliveries: [RecordedDelivery]) {
        self.deliveries = deliveries
    }

    func makeBindings() throws -> PostgresBindings {
        let outcomes = deliveries.map(\.sendOutcome)
        var bindings = PostgresBindings(capacity: 17)
        bindings.append(deliveries.map(\.event.eventID))
        bindings.append(deliveries.map(\.event.day))
        bindings.append(deliveries.map(\.token))
        bindings.append(deliveries.map { $0.sendOutcome != nil && LedgerRow.isStoredAsBytes($0.token) })
        bindings.append(deliveries.map(\.userID))
        bindings.append(outcomes.map { $0?.status.rawValue ?? "" })
        bindings.append(outcomes.map { $0?.environment == .sandbox })
        bindings.append(outcomes.map { Int16(clamping: $0?.apnsStatus ?? 0) })
        bindings.append(outcomes.map { $0?.reason ?? "" })
        bindings.append(outcomes.map { Int16(clamping: $0?.attempts ?? 0) })
        bindings.append(outcomes.map { Int32(clamping: $0?.latencyMilliseconds ?? 0) })
        bindings.append(outcomes.map { $0?.completedAtMilliseconds ?? 0 })
        bindings.append(outcomes.map { $0?.apnsUniqueID ?? "" })
        bindings.append(outcomes.map { $0?.unregisteredAtMilliseconds ?? .min })
        bindings.append(
            deliveries.map {
                if case .message(let result, _) = $0.outcome { String(decoding: result, as: UTF8.self) } else { "" }
            }
        )
        // The days bound the search for earlier outcomes, so it is pruned to their partitions
        // (the keys array makes it one probe per outcome, as in the lookup).
        bindings.append(deliveries.lazy.map(\.event.day).min() ?? 0)
        bindings.append(deliveries.lazy.map(\.event.day).max() ?? 0)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let (
            recordedEarlier, eventID, day, token, userID, status, sandbox, apnsStatus, reason, attempts, latency, completedAt, uniqueID, unregisteredAt, message
        ) =
            try row.decode((Bool, String, Int32, String, String, String?, Bool, Int16?, String?, Int16, Int32, Int64, String?, Int64?, String?).self)
        let key = DeliveryKey(eventID: eventID, day: day, token: token)
        guard recordedEarlier else { return (key, nil) }
        let columns = (eventID, day, token, userID, status, sandbox, apnsStatus, reason, attempts, latency, completedAt, uniqueID, unregisteredAt, message)
        return (key, try LedgerRow.delivery(columns))
    }
}

/// A delivery-ledger row's primary key (the event's key is derived from its ID).
struct DeliveryKey: Hashable, Sendable {
    var eventID: String
    var day: Int32
    var token: String

    init(eventID: String, day: Int32, token: String) {
        self.eventID = eventID
        self.day = day
        self.token = token
    }

    init(_ delivery: RecordedDelivery) {
        self.init(eventID: delivery.event.eventID, day: delivery.event.day, token: delivery.token)
    }
}

/// The ledger statement did not return an outcome it was given (one that another transaction
/// committed while it ran); a retry finds it.
struct PostgresLedgerError: Error, CustomStringConvertible {
    var detail: String
    var description: String { "delivery ledger: \(detail)" }
}
