import Foundation
import KafkaMessages
import KafkaTransport
import MockAPNS
import Testing

/// Live Activity broadcast channels through `herald run` on Tansu, PostgreSQL and the mock APNs
/// (which serves Apple's broadcast and channel management endpoints): channels created through
/// push.channels and `herald channel`, one broadcast per event whatever the redeliveries, Apple's
/// reasons for unknown channels, deletion, push-to-start tokens and `apns-unique-id`.
@Suite(.timeLimit(.minutes(5)))
struct BroadcastChannelTests {
    @Test func channelsManagedThroughKafkaAndTheCommandLineGetOneBroadcastPerEvent() async throws {
        let testbed = try HeraldTestbed(sandboxUniqueIDs: true)
        let topics = testbed.topics
        let bundleID = testbed.bundleID
        let starter = TestDevice(user: "u-la", token: TestDevice.randomToken(), environment: "sandbox")
        try await testbed.withMocks {
            let (environment, httpPort) = try await testbed.heraldEnvironmentServingHTTP(group: "herald-\(UUID().uuidString)")
            let herald = try await testbed.startHerald(environment)
            let answers = try TopicReader(topics: [topics.channelResults])
            let results = try TopicReader(topics: [topics.results])

            // A channel created through push.channels, its command delivered twice.
            let create = #"{"request_id":"\#(bundleID)-create-1","action":"create","topic":"\#(bundleID)","message_storage_policy":1}"#
            try await send(create, to: topics.channels, key: bundleID, testbed)
            try await send(create, to: topics.channels, key: bundleID, testbed)
            let created = try await answers.read(timeout: .seconds(90)) { $0.count >= 2 }
            #expect(created.count == 2)
            #expect(created.map(\.value) == [created[0].value, created[0].value], "the redelivered create is answered from the ledger")
            let createAnswer = try #require(created.first?.json)
            #expect(createAnswer["status"] as? String == "ok")
            #expect(createAnswer["message_storage_policy"] as? Int == 1)
            #expect(created.first.map { String(decoding: $0.key ?? [], as: UTF8.self) } == "\(bundleID)-create-1")
            let channel = try #require(createAnswer["channel_id"] as? String)

            // And one through the command line.
            let made = try await OperatorCommandsTests.herald(["channel", "create", "--topic", bundleID], environment: environment)
            #expect(made.status == 0, "\(made.errors)")
            let madeAnswer = try JSONSerialization.jsonObject(with: Data(made.output.utf8)) as? [String: Any]
            let other = try #require(madeAnswer?["channel_id"] as? String)
            #expect(testbed.production.channels(bundleID: bundleID) == [channel, other], "one channel per create")

            // A push-to-start token, registered like any token, for the sandbox.
            try await testbed.register([starter])
            try await testbed.waitForActiveTokens(users: [starter.user], count: 1)

            // An event to the channel, redelivered; one to a channel APNs does not know; a start.
            let update = #"{"aps":{"timestamp":1795255240,"event":"update","content-state":{"score":"1-0"}}}"#
            let toChannel = #"{"id":"\#(bundleID)-score-1","channel_id":"\#(channel)","topic":"\#(bundleID)","payload":\#(update)}"#
            try await send(toChannel, to: topics.requests, key: "\(bundleID)-score-1", testbed)
            try await send(toChannel, to: topics.requests, key: "\(bundleID)-score-1", testbed)
            try await send(
                #"{"id":"\#(bundleID)-nowhere-1","channel_id":"AAAAAAAAAAAAAAAAAAAAAA==","topic":"\#(bundleID)","payload":\#(update)}"#,
                to: topics.requests,
                key: "\(bundleID)-nowhere-1",
                testbed
            )
            let start = #"{"aps":{"timestamp":1795255240,"event":"start","content-state":{},"attributes-type":"Score","attributes":{}}}"#
            try await send(
                #"{"id":"\#(bundleID)-start-1","user_ids":["u-la"],"topic":"\#(bundleID)","push_type":"liveactivity","payload":\#(start)}"#,
                to: topics.requests,
                key: "\(bundleID)-start-1",
                testbed
            )
            let records = try await results.read(timeout: .seconds(90)) { $0.count >= 4 }
            let byEvent = Dictionary(grouping: records.compactMap(\.json), by: { $0["event_id"] as? String ?? "" })

            let scores = try #require(byEvent["\(bundleID)-score-1"])
            #expect(scores.count == 2)
            #expect(Set(records.filter { $0.json?["event_id"] as? String == "\(bundleID)-score-1" }.map(\.value)).count == 1, "republished identically")
            #expect(testbed.production.broadcastCount(channelID: channel) == 1, "the redelivered event is not sent again")
            let score = scores[0]
            #expect(score["status"] as? String == "delivered")
            #expect(score["channel_id"] as? String == channel)
            #expect(score["user_id"] is NSNull && score["token"] is NSNull && score["apns_id"] is NSNull)
            let requestID = try #require(score["apns_request_id"] as? String)
            let broadcast = try #require(testbed.production.receivedRequests().first { $0.header("apns-channel-id") == channel })
            #expect(broadcast.header(":path") == "/4/broadcasts/apps/\(bundleID)")
            #expect(broadcast.header("apns-request-id") == requestID)
            #expect(broadcast.header("apns-push-type") == "liveactivity")
            #expect(broadcast.header("apns-expiration") == "0", "a broadcast's expiration defaults to 0")

            let nowhere = try #require(byEvent["\(bundleID)-nowhere-1"]?.first)
            #expect(nowhere["status"] as? String == "rejected")
            #expect(nowhere["apns_status"] as? Int == 400)
            #expect(nowhere["reason"] as? String == "ChannelNotRegistered")

            let started = try #require(byEvent["\(bundleID)-start-1"]?.first)
            #expect(started["status"] as? String == "delivered")
            #expect(started["token"] as? String == starter.token)
            let uniqueID = try #require(started["apns_unique_id"] as? String, "the sandbox answers with apns-unique-id")
            #expect(uniqueID.count == 36)
            let startRequest = try #require(testbed.sandbox.receivedRequests().first { $0.token == starter.token })
            #expect(startRequest.header("apns-topic") == "\(bundleID).push-type.liveactivity")
            #expect(startRequest.header("apns-push-type") == "liveactivity")

            // Deleted through push.channels; listed from the command line; then unknown to APNs.
            try await send(
                #"{"request_id":"\#(bundleID)-delete-1","action":"delete","topic":"\#(bundleID)","channel_id":"\#(channel)"}"#,
                to: topics.channels,
                key: bundleID,
                testbed
            )
            let deleted = try await answers.read(timeout: .seconds(60)) { $0.count >= 1 }
            #expect(deleted.first?.json?["status"] as? String == "ok")
            #expect(deleted.first?.json?["channel_id"] as? String == channel)
            let listed = try await OperatorCommandsTests.herald(["channel", "list", "--topic", bundleID], environment: environment)
            #expect(listed.status == 0, "\(listed.errors)")
            let list = try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [String: Any]
            #expect(list?["channel_ids"] as? [String] == [other])
            try await send(
                #"{"id":"\#(bundleID)-score-2","channel_id":"\#(channel)","topic":"\#(bundleID)","payload":\#(update)}"#,
                to: topics.requests,
                key: "\(bundleID)-score-2",
                testbed
            )
            let late = try await results.read(timeout: .seconds(60)) { $0.count >= 1 }
            #expect(late.first?.json?["reason"] as? String == "ChannelNotRegistered")

            let deleteAgain = try await OperatorCommandsTests.herald(
                ["channel", "delete", "--topic", bundleID, "--channel-id", channel],
                environment: environment
            )
            #expect(deleteAgain.status == 1, "deleting a deleted channel is rejected")
            #expect(deleteAgain.output.contains(#""reason":"ChannelNotRegistered""#), "\(deleteAgain.output)")
            // Performed once each through push.channels (the redelivered create was answered from the ledger).
            let metrics = try PrometheusText(try #require(httpGet(port: httpPort, path: "/metrics")?.body))
            #expect(metrics.value("herald_channel_commands_total", ["action": "create", "status": "ok"]) == 1)
            #expect(metrics.value("herald_channel_commands_total", ["action": "delete", "status": "ok"]) == 1)
            herald.send(SIGTERM)
            #expect(try await herald.waitForExit(timeout: .seconds(30)) == 0)
        }
    }

    private func send(_ value: String, to topic: String, key: String, _ testbed: HeraldTestbed) async throws {
        try await testbed.producer.send(KafkaOutgoingMessage(topic: topic, key: Array(key.utf8), value: Array(value.utf8)))
    }
}
