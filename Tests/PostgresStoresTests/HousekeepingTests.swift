import PostgresStores
import PushStores
import Foundation
import Logging
import MetricsTestKit
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// A store failure.
struct Unavailable: Error {}

/// Records the cut-offs it is asked for and answers with fixed counts.
final class RecordingHousekeepingStore: RegistryHousekeepingStore {
    enum Call: Equatable {
        case maintainLedger(LedgerWindow, unpartitionedBefore: Int64)
        case purgeTokens(Timestamp)
        case applyTombstones
        case pruneTombstones(Timestamp)
    }

    let calls = Mutex<[Call]>([])
    let failures = Atomic(0)

    func maintainLedger(window: LedgerWindow, unpartitionedBefore: Int64) async throws -> LedgerMaintenance {
        if failures.load(ordering: .relaxed) > 0 {
            failures.subtract(1, ordering: .relaxed)
            throw Unavailable()
        }
        calls.withLock { $0.append(.maintainLedger(window, unpartitionedBefore: unpartitionedBefore)) }
        var report = LedgerMaintenance()
        report.partitionsDropped = 3
        return report
    }

    func purgeUnregisteredTokens(unregisteredBefore date: Timestamp) async throws -> Int {
        calls.withLock { $0.append(.purgeTokens(date)) }
        return 2
    }

    func applyPendingTombstones() async throws -> Int {
        calls.withLock { $0.append(.applyTombstones) }
        return 1
    }

    func pruneTombstones(unregisteredBefore date: Timestamp) async throws -> Int {
        calls.withLock { $0.append(.pruneTombstones(date)) }
        return 4
    }

    var passes: Int {
        calls.withLock { calls in calls.filter { if case .maintainLedger = $0 { true } else { false } }.count }
    }
}

@Suite(.timeLimit(.minutes(1))) struct HousekeepingTests {
    static let now = Timestamp(millisecondsSince1970: 1_800_000_000_000)
    /// `now` in milliseconds, and its UTC day (days since 1970: 20,833 and a third).
    static let nowMilliseconds: Int64 = 1_800_000_000_000
    static let today: Int32 = 20_833

    @Test func passUsesRetentionsFromConfiguration() async throws {
        var configuration = HousekeepingConfiguration()
        configuration.ledgerRetention = .seconds(3600)
        configuration.tombstoneRetention = .seconds(86_400)
        configuration.unregisteredTokenRetention = .seconds(10 * 86_400)
        let store = RecordingHousekeepingStore()
        let housekeeping = RegistryHousekeeping(
            configuration: configuration,
            store: store,
            now: { Self.now },
            logger: Logger(label: "test")
        )
        let report = try await housekeeping.runPass()
        #expect(report.ledger.partitionsDropped == 3)
        #expect(report.tombstonesApplied == 1)
        #expect(report.tombstonesPruned == 4)
        #expect(report.tokensPurged == 2)
        #expect(
            store.calls.withLock { $0 } == [
                .maintainLedger(
                    LedgerWindow(nowMilliseconds: Self.nowMilliseconds, retention: .seconds(3600)),
                    unpartitionedBefore: Self.nowMilliseconds - 3_600_000
                ),
                .applyTombstones,
                .pruneTombstones(Timestamp(millisecondsSince1970: Self.nowMilliseconds - 86_400_000)),
                .purgeTokens(Timestamp(millisecondsSince1970: Self.nowMilliseconds - 10 * 86_400_000)),
            ]
        )
    }

    @Test func defaultsKeepUnregisteredTokensAndLedgerForAWeek() async throws {
        let configuration = HousekeepingConfiguration()
        #expect(configuration.interval == .seconds(3600))
        #expect(configuration.unregisteredTokenRetention == nil)
        let store = RecordingHousekeepingStore()
        let housekeeping = RegistryHousekeeping(
            configuration: configuration,
            store: store,
            now: { Self.now },
            logger: Logger(label: "test")
        )
        let report = try await housekeeping.runPass()
        #expect(report.tokensPurged == 0)
        let calls = store.calls.withLock { $0 }
        // A week back from a third into day 20,833 is a third into day 20,826: kept, as are the
        // three days ahead.
        let window = LedgerWindow(nowMilliseconds: Self.nowMilliseconds, retention: .seconds(168 * 3600))
        #expect((window.oldestDay, window.newestDay) == (Self.today - 7, Self.today + 3))
        #expect(calls.first == .maintainLedger(window, unpartitionedBefore: Self.nowMilliseconds - 168 * 3_600_000))
        #expect(!calls.contains { if case .purgeTokens = $0 { true } else { false } })
    }

    @Test func runsPeriodicallyKeepsGoingAfterAFailureAndStopsOnGracefulShutdown() async throws {
        var configuration = HousekeepingConfiguration()
        configuration.interval = .milliseconds(20)
        let store = RecordingHousekeepingStore()
        store.failures.store(1, ordering: .relaxed)
        let metrics = TestMetrics()
        let housekeeping = RegistryHousekeeping(configuration: configuration, store: store, metricsFactory: metrics, logger: Logger(label: "test"))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await housekeeping.run() }
                let clock = ContinuousClock()
                let deadline = clock.now + .seconds(20)
                while store.passes < 3, clock.now < deadline {
                    try await Task.sleep(for: .milliseconds(10))
                }
                trigger.triggerGracefulShutdown()
                // run() returns (without throwing) once graceful shutdown is triggered.
                try await group.waitForAll()
            }
        }
        #expect(store.passes >= 3)
        // The failed pass is counted, so an alert can tell (HeraldHousekeepingFailing).
        #expect(try metrics.expectCounter("herald_housekeeping_passes_total", [("result", "failed")]).totalValue == 1)
        #expect(try metrics.expectCounter("herald_housekeeping_passes_total", [("result", "succeeded")]).totalValue >= 3)
    }
}
