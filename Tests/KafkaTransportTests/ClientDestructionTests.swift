import Dispatch
#if canImport(Glibc)
import Glibc
#endif
@testable import KafkaTransport
import Logging
import Synchronization
import Testing

/// The librdkafka handle is destroyed only after every call using it returned: a metrics read
/// (`highWatermark`, `queuedRecords`) or an enqueue racing the service group's shutdown must not
/// touch freed memory.
@Suite(.timeLimit(.minutes(1)))
struct ClientDestructionTests {
    @Test func destroyWaitsForAnImmediateCallInProgressAndRefusesNewOnes() async throws {
        let client = try RDKafkaClient(
            kind: .producer,
            configuration: KafkaConfiguration(bootstrapServers: "", properties: ["test.mock.num.brokers": "1"]),
            properties: [:],
            logger: Logger(label: "test.destruction")
        )
        let events = Events()
        let mayReturn = Atomic(false)
        DispatchQueue.global().async {
            try? client.immediate { _ in
                events.append("immediate call started")
                while !mayReturn.load(ordering: .acquiring) { usleep(1_000) }
                events.append("immediate call returned")
            }
        }
        while events.all.isEmpty { try await Task.sleep(for: .milliseconds(1)) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await client.destroy { _ in }
                events.append("destroyed")
            }
            // Give the destruction every chance to run early.
            try await Task.sleep(for: .milliseconds(200))
            #expect(throws: KafkaError.self) { try client.immediate { _ in } }
            mayReturn.store(true, ordering: .releasing)
            try await group.waitForAll()
        }
        #expect(events.all == ["immediate call started", "immediate call returned", "destroyed"])
    }
}

/// What happened, in order, across threads.
private final class Events: Sendable {
    private let list = Mutex<[String]>([])
    var all: [String] { list.withLock { $0 } }
    func append(_ event: String) { list.withLock { $0.append(event) } }
}
