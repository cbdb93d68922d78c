import APNSCore
import Foundation
import PostgresNIO
import PushStores

/// Every recorded outcome of a batch of events, in one round trip: the batch's days (usually one)
/// bound `day`, which prunes the lookup to their partitions when it starts, generic plan
/// included, and the events' keys make it one probe of that partition's primary key per event.
/// No join: with one, the generic plan compared every found row with every key, several times
/// slower (`EXPLAIN ANALYZE`; BENCHMARKS.md, "What each change bought").
struct RecordedDeliveriesStatement: PostgresPreparedStatement {
    /// Its name on each connection, stated: postgres-nio's default, `String(reflecting:)` of
    /// the type, was computed at every execution (it showed in perf profiles at a steady load).
    static let name = "herald_recorded_deliveries"
    static let sql = "SELECT \(LedgerRow.selectedColumns) FROM push.delivery_ledger AS l WHERE \(condition(firstDay: "$1", eventKeys: "$2", lastDay: "$3"))"

    /// Which rows are the events' outcomes: these parameters' numbers name the batch's first
    /// day, its events' keys and its last day.
    static func condition(firstDay: String, eventKeys: String, lastDay: String) -> String {
        "l.day BETWEEN \(firstDay) AND \(lastDay) AND l.event_key = ANY(\(eventKeys))"
    }
    /// The delivery, or nil for a row of a day the batch spans that is not its event's.
    typealias Row = RecordedDelivery?

    var events: [LedgerRowKey: LedgerEvent]
    var days: ClosedRange<Int32>

    init(events: [LedgerEvent]) {
        self.events = Dictionary(events.map { (LedgerRowKey($0), $0) }, uniquingKeysWith: { first, _ in first })
        let days = events.map(\.day)
        self.days = (days.min() ?? 0)...(days.max() ?? 0)
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        appendBindings(to: &bindings)
        return bindings
    }

    /// The first day, the events' keys and the last day, in the order ``condition(firstDay:eventKeys:lastDay:)`` numbers them.
    func appendBindings(to bindings: inout PostgresBindings) {
        bindings.append(days.lowerBound)
        bindings.append(Array(Set(events.keys.map(\.eventKey))))
        bindings.append(days.upperBound)
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try delivery(try row.decode(LedgerRow.Columns.self))
    }

    /// The delivery a row holds, or nil for a row of a day the batch spans that is not its event's.
    func delivery(_ columns: LedgerRow.Columns) throws -> RecordedDelivery? {
        try events[LedgerRowKey(eventKey: columns.0, day: columns.1)].map { try LedgerRow.delivery(columns, of: $0) }
    }
}

/// Inserts each outcome unless its row's primary key (``LedgerRowIdentity``, bound as it is
/// stored) has one. Returns the key of each inserted row
/// (with no outcome: the one given stands) and each outcome recorded earlier, in full, under the
/// key it was given with. The
/// statement's reads see the ledger as it was before its insert, so earlier outcomes are found
/// by one probe per row (`LATERAL`, pruned to the row's day).
///
/// postgres-nio binds no arrays of optionals, so an absent value travels as a sentinel the
/// statement turns into NULL: '' for text (none is empty when present), 0 for `apns_status`,
/// `Int64.min` for `unregistered_at`.
struct RecordDeliveriesStatement: PostgresPreparedStatement {
    /// Its name on each connection, stated: postgres-nio's default, `String(reflecting:)` of
    /// the type, was computed at every execution (it showed in perf profiles at a steady load).
    static let name = "herald_record_deliveries"
    static let sql = """
        WITH batch AS (
            SELECT b.*, b.target / 2 = 2 AS fcm
            FROM unnest($1::uuid[], $2::integer[], $3::text[], $4::boolean[], $5::text[], $6::text[], $7::boolean[],
                        $8::smallint[], $9::text[], $10::smallint[], $11::integer[], $12::bigint[], $13::text[],
                        $14::bigint[], $15::text[], $16::smallint[], $17::bytea[])
                AS b(event_key, day, token_text, device, user_id, status, sandbox, apns_status, reason, attempts,
                     latency_ms, completed_at, apns_unique_id, unregistered_at, message, target, token)
        ), inserted AS (
            INSERT INTO push.delivery_ledger (event_key, day, token, device, user_id, status, sandbox, apns_status,
                reason, attempts, latency_ms, completed_at, apns_unique_id, unregistered_at, message, fcm, target)
            SELECT event_key, day, token, device, user_id,
                coalesce(array_position(\(LedgerRow.statusCodes), status), 0), sandbox,
                NULLIF(apns_status, 0), NULLIF(reason, ''), attempts, latency_ms, completed_at,
                NULLIF(apns_unique_id, ''), NULLIF(unregistered_at, -9223372036854775808), NULLIF(message, ''), fcm, target
            FROM batch
            ON CONFLICT (event_key, token, day) DO NOTHING
            RETURNING event_key, day, token, device, fcm, target
        )
        SELECT false, i.event_key, i.day, \(LedgerRow.tokenText("i")),
            '', NULL, false, NULL::smallint, NULL, 0::smallint, 0, 0::bigint, NULL, NULL::bigint, NULL, \(LedgerRow.kindCode("i"))
        FROM inserted AS i
        UNION ALL
        SELECT true, \(LedgerRow.columns(tokenText: "b.token_text", kindCode: "(b.target / 2)::smallint"))
        FROM batch AS b CROSS JOIN LATERAL (
            SELECT * FROM push.delivery_ledger AS l
            WHERE l.event_key = b.event_key AND l.token = b.token AND l.day = b.day
        ) AS l
        """
    /// The row's key, and the outcome recorded earlier (nil for a row this statement inserted).
    typealias Row = (LedgerKey, RecordedDelivery?)

    var deliveries: [RecordedDelivery]
    var events: [LedgerRowKey: LedgerEvent]

    init(_ deliveries: [RecordedDelivery]) {
        self.deliveries = deliveries
        events = Dictionary(deliveries.map { (LedgerRowKey($0.event), $0.event) }, uniquingKeysWith: { first, _ in first })
    }

    func makeBindings() throws -> PostgresBindings {
        let outcomes = deliveries.map(\.sendOutcome)
        var bindings = PostgresBindings(capacity: 17)
        let identities = deliveries.map { LedgerRowIdentity(event: $0.event, target: $0.target) }
        bindings.append(identities.map(\.eventKey))
        bindings.append(identities.map(\.day))
        let stored = identities.map(\.stored)
        bindings.append(deliveries.map(\.token))
        bindings.append(stored.map(\.device))
        bindings.append(deliveries.map(\.userID))
        bindings.append(outcomes.map { $0?.status.rawValue ?? "" })
        bindings.append(outcomes.map { $0?.environment == .sandbox })
        bindings.append(outcomes.map { Int16(clamping: $0?.apnsStatus ?? $0?.fcmStatus ?? $0?.webPushStatus ?? 0) })
        bindings.append(outcomes.map { $0?.reason ?? "" })
        bindings.append(outcomes.map { Int16(clamping: $0?.attempts ?? 0) })
        bindings.append(outcomes.map { Int32(clamping: $0?.latencyMilliseconds ?? 0) })
        bindings.append(outcomes.map { $0?.completedAtMilliseconds ?? 0 })
        bindings.append(outcomes.map { $0?.apnsUniqueID ?? $0?.fcmMessageID ?? $0?.webPushLocation ?? "" })
        bindings.append(outcomes.map { $0?.unregisteredAtMilliseconds ?? .min })
        bindings.append(
            deliveries.map {
                if case .message(let result, _) = $0.outcome { String(decoding: result, as: UTF8.self) } else { "" }
            }
        )
        bindings.append(stored.map(\.tag))
        bindings.append(identities.map { ByteBuffer(bytes: $0.token) })
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let random = row.makeRandomAccess()
        let recordedEarlier = try random[0].decode(Bool.self)
        let eventKey = try random[1].decode(UUID.self)
        let day = try random[2].decode(Int32.self)
        let token = try random[3].decode(String.self)
        guard let event = events[LedgerRowKey(eventKey: eventKey, day: day)] else {
            throw PostgresLedgerError(detail: "a row of an event not recorded here")
        }
        let kindCode = try random[15].decode(Int16.self)
        let key = LedgerKey(event: event, target: LedgerTarget(try LedgerRow.kind(code: kindCode), token))
        guard recordedEarlier else { return (key, nil) }
        let columns: LedgerRow.Columns = (
            eventKey, day, token, try random[4].decode(String.self), try random[5].decode(String?.self), try random[6].decode(Bool.self),
            try random[7].decode(Int16?.self), try random[8].decode(String?.self), try random[9].decode(Int16.self),
            try random[10].decode(Int32.self), try random[11].decode(Int64.self), try random[12].decode(String?.self),
            try random[13].decode(Int64?.self), try random[14].decode(String?.self), kindCode
        )
        return (key, try LedgerRow.delivery(columns, of: event))
    }
}
