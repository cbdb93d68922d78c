// Herald's pipeline with an app's own parts: messages from memory, results to memory, tokens
// and the ledger in dictionaries, and an APNs client that accepts everything. Nothing here links
// a Kafka or PostgreSQL client.
import APNSCore
import DeviceTokenStore
import Foundation
import KafkaMessages
import Logging
import PushPipeline
import ServiceLifecycle
import Synchronization

/// Hands out the given messages once, then nothing; remembers what was committed.
final class InMemorySource: MessageSource {
    private let pending: Mutex<[KafkaMessage]>
    let committed = Mutex<[KafkaTopicPartition: Int64]>([:])

    init(_ messages: [KafkaMessage]) { pending = Mutex(messages) }

    func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let batch = pending.withLock { pending in
            defer { pending.removeFirst(min(maxMessages, pending.count)) }
            return Array(pending.prefix(maxMessages))
        }
        if batch.isEmpty { try await Task.sleep(for: timeout) }
        return batch
    }

    func commit(_ offsets: [KafkaTopicPartition: Int64]) async throws {
        committed.withLock { $0.merge(offsets) { max($0, $1) } }
    }

    func setRebalanceListener(_ listener: any KafkaRebalanceListener) {}
    func pauseAll() async throws {}
    func resumeAll() async throws {}
}

/// Keeps every published record.
final class InMemoryPublisher: MessagePublisher {
    let published = Mutex<[KafkaOutgoingMessage]>([])

    func send(_ message: KafkaOutgoingMessage) async throws {
        published.withLock { $0.append(message) }
    }
}

/// Tokens by (topic, user), and the ledger's outcomes by (event, token).
final class InMemoryRegistry: DeviceTokenStore, DeliveryLedger {
    private let tokens: [String: [DeviceToken]]
    private let outcomes = Mutex<[LedgerEvent: [String: RecordedDelivery]]>([:])

    init(topic: String, tokens: [DeviceToken]) {
        self.tokens = Dictionary(grouping: tokens) { "\(topic)/\($0.userID)" }
    }

    func activeTokens(topic: String, userIDs: [String], environment: APNSEnvironment?) async throws -> [String: [DeviceToken]] {
        var found: [String: [DeviceToken]] = [:]
        for user in userIDs {
            let devices = (tokens["\(topic)/\(user)"] ?? []).filter { environment == nil || $0.environment == environment }
            if !devices.isEmpty { found[user] = devices }
        }
        return found
    }

    func apply(_ update: TokenRegistryUpdate) async throws -> Bool { false }
    func markUnregistered(topic: String, token: String, at: Timestamp) async throws -> Bool { false }

    func recordedDeliveries(of events: [LedgerEvent]) async throws -> [LedgerEvent: [String: RecordedDelivery]] {
        outcomes.withLock { outcomes in outcomes.filter { events.contains($0.key) } }
    }

    func record(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws -> [RecordedDelivery] {
        outcomes.withLock { outcomes in
            batch.map { entry in
                let event = entry.delivery.event
                if let earlier = outcomes[event]?[entry.delivery.token] { return earlier }
                outcomes[event, default: [:]][entry.delivery.token] = entry.delivery
                return entry.delivery
            }
        }
    }
}

/// Answers 200 to every request (use ``APNSHTTP2Client`` from the APNSClient product for real).
struct AcceptingAPNS: APNSClientProtocol {
    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws -> APNSResponse {
        APNSResponse(status: 200, apnsID: request.apnsID)
    }
}

let logger = Logger(label: "pipeline-example")
let topic = "com.example.app"
let devices = [
    DeviceToken(userID: "alice", token: String(repeating: "a1", count: 32), environment: .production),
    DeviceToken(userID: "alice", token: String(repeating: "a2", count: 32), environment: .sandbox),
    DeviceToken(userID: "bob", token: String(repeating: "b1", count: 32), environment: .production),
]
let event = #"{"id":"order-42","user_ids":["alice","bob","carol"],"topic":"com.example.app","payload":{"aps":{"alert":"Shipped"}}}"#
let source = InMemorySource([KafkaMessage(topic: "push.requests", partition: 0, offset: 0, key: nil, value: Array(event.utf8))])
let publisher = InMemoryPublisher()
let registry = InMemoryRegistry(topic: topic, tokens: devices)

let pipeline = NotificationPipeline(
    configuration: PipelineConfiguration(),
    source: source,
    publisher: publisher,
    store: registry,
    ledger: registry,
    apns: AcceptingAPNS(),
    logger: logger
)
let services = ServiceGroup(services: [pipeline], logger: logger)
try await withThrowingDiscardingTaskGroup { group in
    group.addTask { try await services.run() }
    // The message is finished, and its offset committed, once every result was published.
    let deadline = ContinuousClock.now + .seconds(30)
    while source.committed.withLock({ $0[KafkaTopicPartition(topic: "push.requests", partition: 0)] }) != 1 {
        guard ContinuousClock.now < deadline else {
            print("unexpected: the message was not committed within 30 s")
            exit(1)
        }
        try await Task.sleep(for: .milliseconds(10))
    }
    await services.triggerGracefulShutdown()
}

let results = publisher.published.withLock { $0 }.filter { $0.topic == "push.results" }
for result in results { print(String(decoding: result.value ?? [], as: UTF8.self)) }
// Three devices delivered, and one no_devices result for carol.
guard results.count == 4 else {
    print("unexpected: \(results.count) results")
    exit(1)
}
