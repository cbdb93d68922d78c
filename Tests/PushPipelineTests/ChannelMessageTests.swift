import PushStores
import PushCore
import APNSCore
import Foundation
import PushPipeline
import Testing

/// The contract's Live Activity broadcast messages: events to a channel, push.channels commands,
/// and the results and answers Herald writes for them.
@Suite struct ChannelMessageTests {
    static let channel = "dHN0LXNyY2gtY2hubA=="

    @Test func anEventToAChannelTakesItsDefaults() throws {
        let event = try NotificationEvent(
            json: Array(#"{"id":"score-1","channel_id":"\#(Self.channel)","topic":"com.example.scores","payload":{"aps":{"event":"update"}}}"#.utf8)
        )
        #expect(event.channelID == Self.channel)
        #expect(event.userIDs.isEmpty)
        #expect(event.pushType == .liveactivity)
        #expect(event.expiration == 0)
        #expect(event.environment == .production)
        #expect(event.priority == .immediate)
    }

    @Test func aBroadcastMayCarryFiveKilobytes() throws {
        let big = String(repeating: "x", count: 4900)
        let json = #"{"id":"e","channel_id":"\#(Self.channel)","topic":"t","payload":{"aps":{},"s":"\#(big)"}}"#
        #expect(try NotificationEvent(json: Array(json.utf8)).payload?.count ?? 0 > 4096)
        let tooBig = json.replacingOccurrences(of: big, with: big + String(repeating: "y", count: 300))
        #expect(throws: InputRejection.self) { try NotificationEvent(json: Array(tooBig.utf8)) }
        do {
            _ = try NotificationEvent(json: Array(tooBig.utf8))
        } catch {
            #expect(error.code == .payloadTooLarge)
        }
    }

    static let rejectedEvents: [String] = [
        #"{"id":"e","topic":"t","payload":{"aps":{}}}"#,
        #"{"id":"e","user_ids":["u"],"channel_id":"\#(channel)","topic":"t","payload":{"aps":{}}}"#,
        #"{"id":"e","channel_id":"not base64!","topic":"t","payload":{"aps":{}}}"#,
        #"{"id":"e","channel_id":"abc","topic":"t","payload":{"aps":{}}}"#,
        #"{"id":"e","channel_id":"\#(channel)","topic":"t","push_type":"alert","payload":{"aps":{}}}"#,
        #"{"id":"e","channel_id":7,"topic":"t","payload":{"aps":{}}}"#,
        #"{"id":"e","channel_id":"","topic":"t","payload":{"aps":{}}}"#,
    ]

    @Test(arguments: rejectedEvents)
    func anEventNamesUsersOrOneValidChannel(input: String) {
        do {
            _ = try NotificationEvent(json: Array(input.utf8))
            Issue.record("accepted \(input)")
        } catch {
            #expect(error.code == .schemaViolation, "\(input)")
        }
    }

    @Test func commandsAreReadWithTheirDefaults() throws {
        let create = try ChannelCommand(json: Array(#"{"request_id":"r-1","action":"create","topic":"com.example.scores"}"#.utf8))
        #expect(create.environment == .production)
        #expect(create.messageStoragePolicy == 0)
        #expect(create.operation == .create(messageStoragePolicy: 0))
        let delete = try ChannelCommand(
            json: Array(
                #"{"request_id":"r-2","action":"delete","topic":"t","environment":"sandbox","channel_id":"\#(Self.channel)"}"#.utf8
            )
        )
        #expect(delete.operation == .delete(channelID: Self.channel))
        #expect(delete.environment == .sandbox)
        #expect(try ChannelCommand(json: Array(#"{"request_id":"r","action":"list","topic":"t"}"#.utf8)).operation == .list)
    }

    static let rejectedCommands: [String] = [
        #"{"action":"create","topic":"t"}"#,
        #"{"request_id":"r","action":"rename","topic":"t"}"#,
        #"{"request_id":"r","action":"read","topic":"t"}"#,
        #"{"request_id":"r","action":"delete","topic":"t","channel_id":"%%%"}"#,
        #"{"request_id":"r","action":"create","topic":"t","message_storage_policy":2}"#,
        #"{"request_id":"r","action":"list","topic":"t","environment":"dev"}"#,
        #"{"request_id":"r","action":"list"}"#,
    ]

    @Test(arguments: rejectedCommands)
    func badCommandsAreSchemaViolations(input: String) {
        do {
            _ = try ChannelCommand(json: Array(input.utf8))
            Issue.record("accepted \(input)")
        } catch {
            #expect(error.code == .schemaViolation, "\(input)")
        }
    }

    @Test func aChannelsResultNamesTheChannelAndNoDevice() throws {
        let result = DeviceResult(
            eventID: "score-1",
            userID: nil,
            token: nil,
            topic: "com.example.scores",
            environment: .sandbox,
            status: .delivered,
            apnsStatus: 200,
            reason: nil,
            apnsID: nil,
            attempts: 1,
            latencyMilliseconds: 12,
            completedAtMilliseconds: 1_795_255_240_748,
            channelID: Self.channel,
            apnsRequestID: "0f0e0d0c-0b0a-5908-8706-050403020100",
            apnsUniqueID: "a1b2c3d4-0000-4000-8000-000000000001"
        )
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.json())) as? [String: Any])
        #expect(json["user_id"] is NSNull && json["token"] is NSNull && json["apns_id"] is NSNull)
        #expect(json["channel_id"] as? String == Self.channel)
        #expect(json["apns_request_id"] as? String == "0f0e0d0c-0b0a-5908-8706-050403020100")
        #expect(json["apns_unique_id"] as? String == "a1b2c3d4-0000-4000-8000-000000000001")
        #expect(json["completed_at"] as? String == "2026-11-21T10:00:40.748Z")

        var deviceResult = result
        (deviceResult.userID, deviceResult.token, deviceResult.channelID, deviceResult.apnsUniqueID) = ("u-1", "aa", nil, nil)
        let deviceJSON = try #require(try JSONSerialization.jsonObject(with: Data(deviceResult.json())) as? [String: Any])
        #expect(
            Set(deviceJSON.keys) == [
                "event_id", "user_id", "token", "topic", "environment", "status", "apns_status", "reason", "apns_id",
                "attempts", "latency_ms", "completed_at", "platform",
            ], "a device's result has the fields it always had, and its platform")
        #expect(deviceJSON["platform"] as? String == "apns")
    }

    @Test func anAnswerHasEveryField() throws {
        let command = ChannelCommand(requestID: "r-1", action: .list, topic: "com.example.scores")
        let answer = ChannelCommandResult(
            command: command,
            status: .ok,
            apnsStatus: 200,
            channelIDs: [Self.channel],
            completedAtMilliseconds: 1_795_255_240_748
        )
        #expect(
            String(decoding: answer.json(), as: UTF8.self)
                == #"{"request_id":"r-1","action":"list","topic":"com.example.scores","environment":"production","status":"ok","apns_status":200,"reason":null,"channel_id":null,"channel_ids":["\#(Self.channel)"],"message_storage_policy":null,"completed_at":"2026-11-21T10:00:40.748Z"}"#
        )
    }
}
