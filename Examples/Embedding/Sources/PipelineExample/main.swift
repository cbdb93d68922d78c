// Herald's pipeline with the in-memory parts of PushPipelineTesting: messages from memory,
// results to memory, tokens and the ledger in dictionaries, and an APNs client that accepts
// everything (a production embedding implements MessageSource, MessagePublisher,
// DeviceTokenStore and DeliveryLedger over its own broker and database). Nothing here links a
// Kafka or PostgreSQL client.
import APNSCore
import PushStores
import Foundation
import KafkaMessages
import Logging
import PushPipeline
import PushPipelineTesting
import ServiceLifecycle

let logger = Logger(label: "pipeline-example")
let topic = "com.example.app"
let devices = [
    DeviceToken(userID: "alice", token: String(repeating: "a1", count: 32), environment: .production),
    DeviceToken(userID: "alice", token: String(repeating: "a2", count: 32), environment: .sandbox),
    DeviceToken(userID: "bob", token: String(repeating: "b1", count: 32), environment: .production),
]
let event = #"{"id":"order-42","user_ids":["alice","bob","carol"],"topic":"com.example.app","payload":{"aps":{"alert":"Shipped"}}}"#
let source = InMemoryMessageSource([KafkaMessage(topic: "push.requests", partition: 0, offset: 0, key: nil, value: Array(event.utf8))])
let publisher = InMemoryMessagePublisher()
let registry = InMemoryTokenRegistry()
for device in devices { registry.register(device, topic: topic) }

let pipeline = NotificationPipeline(
    configuration: PipelineConfiguration(),
    source: source,
    publisher: publisher,
    store: registry,
    ledger: registry,
    apns: ScriptedAPNSClient(),
    logger: logger
)
let services = ServiceGroup(services: [pipeline], logger: logger)
try await withThrowingDiscardingTaskGroup { group in
    group.addTask { try await services.run() }
    // The message is finished, and its offset committed, once every result was published.
    let deadline = ContinuousClock.now + .seconds(30)
    while source.committed[KafkaTopicPartition(topic: "push.requests", partition: 0)] != 1 {
        guard ContinuousClock.now < deadline else {
            print("unexpected: the message was not committed within 30 s")
            exit(1)
        }
        try await Task.sleep(for: .milliseconds(10))
    }
    await services.triggerGracefulShutdown()
}

let results = publisher.messages(on: "push.results")
for result in results { print(String(decoding: result.value ?? [], as: UTF8.self)) }
// Three devices delivered, and one no_devices result for carol.
guard results.count == 4 else {
    print("unexpected: \(results.count) results")
    exit(1)
}
