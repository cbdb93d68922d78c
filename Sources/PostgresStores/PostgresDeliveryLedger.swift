import APNSCore
import Crypto
package import PushStores
package import Foundation
import Logging
import PostgresNIO
import Synchronization

extension PostgresStore: DeliveryLedger {
    /// One statement for the partitioned ledger (``RecordedDeliveriesStatement``); while
    /// `push.deliveries` (before migration 5) exists, it is read too.
    package func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [LedgerTarget: RecordedDelivery]] {
        guard !events.isEmpty else { return [:] }
        var deliveries: [LedgerEvent: [LedgerTarget: RecordedDelivery]] = [:]
        let lookup = RecordedDeliveriesStatement(events: events)
        for delivery in try await rows(of: lookup) {
            // A row of a day the batch spans but this event's record is not from is another record's.
            if let delivery { deliveries[delivery.event, default: [:]][delivery.target] = delivery }
        }
        try await addUnpartitionedDeliveries(of: events, to: &deliveries)
        return deliveries
    }

    /// Adds what the ledger table before migration 5 holds for `events`, where `deliveries` has
    /// no outcome for the (event, target); no round trip once that table is gone.
    func addUnpartitionedDeliveries(of events: [LedgerEvent], to deliveries: inout [LedgerEvent: [LedgerTarget: RecordedDelivery]]) async throws {
        for delivery in try await unpartitionedLedger.recordedDeliveries(of: events, client: client, logger: logger) {
            deliveries[delivery.event, default: [:]][delivery.target] = deliveries[delivery.event]?[delivery.target] ?? delivery
        }
    }

    /// One statement records the whole batch, so without registry marks it is one round trip and
    /// no transaction: the batch sits between APNs' answers and their results' publication, and
    /// its latency is the window in which a crash repeats a push. With marks, the marks and the
    /// statement share one transaction.
    package func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        // One row per (event, target): the first outcome given for it stands for every copy.
        var rows: [RecordedDelivery] = []
        var rowOfKey: [LedgerKey: Int] = [:]
        let rowOfEntry = batch.map { entry in
            if let row = rowOfKey[LedgerKey(entry.delivery)] { return row }
            var row = entry.delivery
            // Kept only when a mark of this (event, target) changes the registry row (below).
            row.unregisteredAtMilliseconds = nil
            rows.append(row)
            rowOfKey[LedgerKey(row)] = rows.count - 1
            return rows.count - 1
        }
        guard !rows.isEmpty else { return [] }
        guard batch.contains(where: { $0.mark != nil }) else {
            let standing = try Self.standing(rows, await self.rows(of: RecordDeliveriesStatement(rows)))
            return rowOfEntry.map { standing[$0] }
        }
        let logger = self.logger
        let standing = try await withTransaction { connection in
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
            return try Self.standing(rows, await connection.rows(of: RecordDeliveriesStatement(rows), logger: logger))
        }
        return rowOfEntry.map { standing[$0] }
    }

    /// The outcome that stands for each of `rows`, in order, from what ``RecordDeliveriesStatement``
    /// returned for them.
    ///
    /// An outcome another transaction commits while the statement runs is neither inserted nor
    /// seen by it: that throws, and the caller's retry finds the outcome. (Two targets of a batch
    /// never share a key: ``LedgerRow/storedToken(_:)``.)
    private static func standing(
        _ rows: [RecordedDelivery],
        _ returned: [RecordDeliveriesStatement.Row]
    ) throws -> [RecordedDelivery] {
        var inserted = Set<LedgerKey>()
        var recordedBefore: [LedgerKey: RecordedDelivery] = [:]
        for (key, earlier) in returned {
            if let earlier {
                recordedBefore[key] = earlier
            } else {
                inserted.insert(key)
            }
        }
        return try rows.map { row in
            if let earlier = recordedBefore[LedgerKey(row)] { return earlier }
            guard inserted.contains(LedgerKey(row)) else {
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

    /// The row's columns as the statements read them: event key, day, token as text, user,
    /// status text, the outcome's fields, then the target's kind (``kindCode(_:)``).
    static let selectedColumns = columns(tokenText: tokenText("l"), kindCode: kindCode("l"))

    /// ``selectedColumns`` of the row `l`, with the token text and kind code given.
    static func columns(tokenText: String, kindCode: String) -> String {
        """
        l.event_key, l.day, \(tokenText),
        l.user_id, (\(statusCodes))[l.status], l.sandbox, l.apns_status, l.reason, l.attempts, l.latency_ms,
        l.completed_at, l.apns_unique_id, l.unregistered_at, l.message, \(kindCode)
        """
    }

    typealias Columns = (
        UUID, Int32, String, String, String?, Bool, Int16?, String?, Int16, Int32, Int64, String?, Int64?, String?, Int16
    )

    /// The text of the token of `row` (an alias): after its tag byte (migration 7), its bytes in
    /// hex when `device`, else its UTF-8; a row written before keeps no tag.
    static func tokenText(_ row: String) -> String {
        """
        CASE WHEN \(row).device THEN encode(CASE WHEN \(row).target IS NULL THEN \(row).token ELSE substr(\(row).token, 2) END, 'hex') \
        ELSE convert_from(CASE WHEN \(row).target IS NULL THEN \(row).token ELSE substr(\(row).token, 2) END, 'UTF8') END
        """
    }

    /// The kind code (``kind(code:)``) of the target of `row` (an alias): from its tag, or for a
    /// row written before migration 7, from `fcm` and `device`.
    static func kindCode(_ row: String) -> String {
        "coalesce(\(row).target / 2, CASE WHEN \(row).fcm THEN 2 WHEN \(row).device THEN 1 ELSE 3 END)::smallint"
    }

    /// The code of a target's kind in the ledger's `target` tag (twice it, plus one when the
    /// token is kept as hex-decoded bytes).
    static func code(of kind: LedgerTarget.Kind) -> Int16 {
        switch kind {
        case .apnsDevice: 1
        case .fcmDevice: 2
        case .other: 3
        case .webPushDevice: 4
        }
    }

    /// The kind a code of ``code(of:)`` stands for.
    static func kind(code: Int16) throws -> LedgerTarget.Kind {
        switch code {
        case 1: .apnsDevice
        case 2: .fcmDevice
        case 3: .other
        case 4: .webPushDevice
        default: throw PostgresLedgerError(detail: "unknown target kind \(code)")
        }
    }

    /// How `target` is kept: its tag, and whether its token is kept as the bytes its hex spells
    /// (an APNs token, which is lowercase hex; one written into the registry otherwise is kept as
    /// UTF-8, and its tag says so). The tag is also the token's first byte, so two rows share a
    /// key only for the same kind, encoding and text.
    static func storedToken(_ target: LedgerTarget) -> (tag: Int16, device: Bool) {
        let device = target.kind == .apnsDevice && isLowercaseHex(target.token)
        return (code(of: target.kind) * 2 + (device ? 1 : 0), device)
    }

    /// The `token` column of `target`'s row, part of its primary key: the tag of
    /// ``storedToken(_:)`` (`stored`) as one byte, then the bytes the hex spells or the UTF-8.
    static func storedTokenBytes(_ target: LedgerTarget, _ stored: (tag: Int16, device: Bool)) -> [UInt8] {
        var bytes = [UInt8(truncatingIfNeeded: stored.tag)]
        if stored.device {
            let digits = Array(target.token.utf8)
            bytes.reserveCapacity(1 + digits.count / 2)
            for index in stride(from: 0, to: digits.count, by: 2) {
                bytes.append(hexValue(digits[index]) << 4 | hexValue(digits[index + 1]))
            }
        } else {
            bytes.append(contentsOf: target.token.utf8)
        }
        return bytes
    }

    /// The value of a lowercase hex digit.
    private static func hexValue(_ digit: UInt8) -> UInt8 {
        digit <= UInt8(ascii: "9") ? digit - UInt8(ascii: "0") : digit - UInt8(ascii: "a") + 10
    }

    /// The key of an event's rows: the MD5 of "<bundle ID>/<event ID>" (a bundle ID has no `/`)
    /// as a UUID, PostgreSQL's `md5('com.example.shop/order-42')::uuid`, so an operator can look
    /// an event up by hand.
    static func eventKey(_ event: LedgerEvent) -> UUID {
        let digest = Array(Insecure.MD5.hash(data: Array("\(event.topic)/\(event.eventID)".utf8)))
        return UUID(
            uuid: (
                digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
                digest[8], digest[9], digest[10], digest[11], digest[12], digest[13], digest[14], digest[15]
            )
        )
    }

    /// Whether `token` is lowercase hex of even length, as an APNs device token is.
    private static func isLowercaseHex(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.count.isMultiple(of: 2)
            && token.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// The delivery a row read as ``selectedColumns`` holds, for `event`.
    static func delivery(_ columns: Columns, of event: LedgerEvent) throws -> RecordedDelivery {
        // An FCM row keeps FCM's status and message name in the provider's columns (migration 6),
        // a web push row the push service's status and the message's `Location` (migration 8).
        let (_, _, token, userID, status, sandbox, providerStatus, reason, attempts, latency, completedAt, providerID, unregisteredAt, message, kindCode) =
            columns
        let eventID = event.eventID
        let kind = try kind(code: kindCode)
        let platform: DevicePlatform =
            switch kind {
            case .fcmDevice: .fcm
            case .webPushDevice: .webpush
            case .apnsDevice, .other: .apns
            }
        let apns = platform == .apns
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
                    apnsStatus: apns ? providerStatus.map(Int.init) : nil,
                    reason: reason,
                    attempts: Int(attempts),
                    latencyMilliseconds: Int64(latency),
                    completedAtMilliseconds: completedAt,
                    apnsUniqueID: apns ? providerID : nil,
                    unregisteredAtMilliseconds: unregisteredAt,
                    platform: platform,
                    fcmStatus: platform == .fcm ? providerStatus.map(Int.init) : nil,
                    fcmMessageID: platform == .fcm ? providerID : nil,
                    webPushStatus: platform == .webpush ? providerStatus.map(Int.init) : nil,
                    webPushLocation: platform == .webpush ? providerID : nil
                )
            )
        }
        return RecordedDelivery(event: event, target: LedgerTarget(kind, token), userID: userID, outcome: outcome)
    }
}

/// A delivery-ledger row's primary key: its event and target.
struct LedgerKey: Hashable, Sendable {
    var event: LedgerEvent
    var target: LedgerTarget

    init(event: LedgerEvent, target: LedgerTarget) {
        self.event = event
        self.target = target
    }

    init(_ delivery: RecordedDelivery) {
        self.init(event: delivery.event, target: delivery.target)
    }
}

/// The primary key PostgreSQL holds for an outcome of `push.delivery_ledger`: `event_key`, `day`
/// and the `token` bytes, exactly as ``RecordDeliveriesStatement`` writes them. Two outcomes with
/// equal identities are one row to PostgreSQL, whatever their targets say.
package struct LedgerRowIdentity: Hashable, Sendable {
    package var eventKey: UUID
    package var day: Int32
    package var token: [UInt8]
    /// The `target` tag and the `device` flag of the row (``LedgerRow/storedToken(_:)``), which
    /// the token's bytes start with and follow.
    var stored: (tag: Int16, device: Bool) { (Int16(token[0]), token[0] & 1 == 1) }

    package init(event: LedgerEvent, target: LedgerTarget) {
        eventKey = LedgerRow.eventKey(event)
        day = event.day
        token = LedgerRow.storedTokenBytes(target, LedgerRow.storedToken(target))
    }
}

/// The part of a row's primary key that names its event: `event_key` and `day`.
struct LedgerRowKey: Hashable, Sendable {
    var eventKey: UUID
    var day: Int32

    init(eventKey: UUID, day: Int32) {
        self.eventKey = eventKey
        self.day = day
    }

    init(_ event: LedgerEvent) {
        self.init(eventKey: LedgerRow.eventKey(event), day: event.day)
    }
}

/// The ledger statement did not return an outcome it was given (one that another transaction
/// committed while it ran); a retry finds it.
struct PostgresLedgerError: Error, CustomStringConvertible {
    var detail: String
    var description: String { "delivery ledger: \(detail)" }
}
