import APNSCore
import PushCore
import PushStores
import FCMCore
import Foundation
import PushPipeline
import Testing

@Suite struct NotificationEventTests {
    @Test func validEventWithDefaults() throws {
        let event = try NotificationEvent(
            json: Array(
                #"""
                {"id":"order-42","user_ids":["u-1","u-2","u-1"],"topic":"com.example.shop","unknown":true,
                 "payload":{"aps":{"alert":{"title":"Shipped","body":"On its way \u00e9"}},"n":1.50}}
                """#.utf8))
        #expect(event.id == "order-42")
        #expect(event.userIDs == ["u-1", "u-2"])
        #expect(event.pushType == .alert)
        #expect(event.priority == .immediate)
        #expect(event.expiration == nil && event.collapseID == nil && event.environment == nil)
        #expect(
            String(decoding: event.payload ?? [], as: UTF8.self)
                == #"{"aps":{"alert":{"title":"Shipped","body":"On its way é"}},"n":1.50}"#)
    }

    @Test func backgroundDefaultsToPriorityFiveAndOptionalFieldsAreRead() throws {
        let event = try NotificationEvent(
            json: Array(
                #"""
                {"id":"e","user_ids":["u"],"topic":"t","push_type":"background","expiration":0,"collapse_id":"c",
                 "environment":"sandbox","payload":{"aps":{"content-available":1}}}
                """#.utf8))
        #expect(event.priority == .conserveEnergy)
        #expect(event.expiration == 0)
        #expect(event.collapseID == "c")
        #expect(event.environment == .sandbox)
    }

    static let rejected: [(String, InputRejection.Code)] = [
        ("", .invalidJSON),
        ("{not json", .invalidJSON),
        ("[1,2]", .invalidJSON),
        (#"{"id":"e"} trailing"#, .invalidJSON),
        (#"{"user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"","user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":[],"topic":"t","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":[1],"topic":"t","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","push_type":"ALERT","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","priority":7,"payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","priority":10.0,"payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","expiration":1e9,"payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","expiration":-1,"payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","payload":{"alert":"x"}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","payload":"x"}"#, .schemaViolation),
        (#"{"id":"e\u0000","user_ids":["u"],"topic":"t","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","environment":"dev","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t\nx","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","collapse_id":"a\r\nb","payload":{"aps":{}}}"#, .schemaViolation),
        (#"{"id":"e","user_ids":["u"],"topic":"t","collapse_id":"a\u007fb","payload":{"aps":{}}}"#, .schemaViolation),
    ]

    @Test(arguments: rejected)
    func invalidInputIsRejectedWithItsCode(input: String, code: InputRejection.Code) {
        #expect(throws: InputRejection.self) { try NotificationEvent(json: Array(input.utf8)) }
        do {
            _ = try NotificationEvent(json: Array(input.utf8))
        } catch {
            #expect(error.code == code)
            #expect(!error.detail.isEmpty)
        }
    }

    @Test func invalidUTF8AndTombstonesAreInvalidJSON() {
        #expect(throws: InputRejection(.invalidJSON, "value is not UTF-8")) {
            try NotificationEvent(json: [0x7B, 0xFF, 0x7D])
        }
        #expect(throws: InputRejection(.invalidJSON, "empty value")) { try NotificationEvent(json: nil) }
    }

    @Test func deepNestingIsRejectedNotACrash() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: InputRejection.self) { try NotificationEvent(json: Array(deep.utf8)) }
    }

    @Test func payloadLimitDependsOnPushType() throws {
        let body = String(repeating: "x", count: 4500)
        let alert = #"{"id":"e","user_ids":["u"],"topic":"t","payload":{"aps":{"alert":"\#(body)"}}}"#
        #expect(throws: InputRejection.self) { try NotificationEvent(json: Array(alert.utf8)) }
        do { _ = try NotificationEvent(json: Array(alert.utf8)) } catch { #expect(error.code == .payloadTooLarge) }
        let voip = #"{"id":"e","user_ids":["u"],"topic":"t","push_type":"voip","payload":{"aps":{"alert":"\#(body)"}}}"#
        #expect(try NotificationEvent(json: Array(voip.utf8)).payload?.count ?? .max < 5120)
    }

    @Test func thousandUsersAllowedButNotMore() throws {
        func event(_ count: Int) -> [UInt8] {
            let users = (0..<count).map { "\"u\($0)\"" }.joined(separator: ",")
            return Array(#"{"id":"e","user_ids":[\#(users)],"topic":"t","payload":{"aps":{}}}"#.utf8)
        }
        #expect(try NotificationEvent(json: event(1000)).userIDs.count == 1000)
        #expect(throws: InputRejection.self) { try NotificationEvent(json: event(1001)) }
    }
}

@Suite struct TokenUpdateTests {
    @Test func tokensAreNormalisedFromTheFormsAppsSend() throws {
        let hex = String(repeating: "ab", count: 32)
        #expect(try DeviceTokenText.normalize(hex.uppercased()) == hex)
        #expect(
            try DeviceTokenText.normalize(
                "<"
                    + stride(from: 0, to: 64, by: 8).map { index in
                        String(hex.uppercased().dropFirst(index).prefix(8))
                    }.joined(separator: " ") + ">") == hex)
        #expect(try DeviceTokenText.normalize(String(repeating: "0f", count: 50)).count == 100)
    }

    @Test(arguments: ["xyz", String(repeating: "a", count: 63), String(repeating: "a", count: 30), String(repeating: "ab", count: 101)])
    func badTokensAreInvalid(token: String) {
        #expect(throws: InputRejection.self) { try DeviceTokenText.normalize(token) }
    }

    @Test func registerUpdateIsParsed() throws {
        let update = try TokenRegistryUpdate(
            json: Array(
                #"""
                {"action":"register","user_id":"u-1","token":"<AB AB ABAB abababab abababab abababab abababab abababab abababab abababab>",
                 "topic":"com.example.shop","timestamp":"2026-11-21T11:00:00.250+01:00"}
                """#.utf8))
        #expect(update.action == .register)
        #expect(update.token == String(repeating: "ab", count: 32))
        #expect(update.environment == .production)
        #expect(update.timestamp == Timestamp(microsecondsSince1970: 1_795_255_200_250_000))
    }

    @Test func registerNeedsUserAndUnregisterDoesNot() throws {
        let token = String(repeating: "cd", count: 32)
        #expect(throws: InputRejection.self) {
            try TokenRegistryUpdate(json: Array(#"{"action":"register","token":"\#(token)","topic":"t","timestamp":"2026-11-21T10:00:00Z"}"#.utf8))
        }
        let update = try TokenRegistryUpdate(json: Array(#"{"action":"unregister","token":"\#(token)","topic":"t","timestamp":"2026-11-21T10:00:00Z"}"#.utf8))
        #expect(update.userID == nil)
    }

    @Test func badTokenIsInvalidTokenAndBadTimestampIsSchemaViolation() {
        do {
            _ = try TokenRegistryUpdate(json: Array(#"{"action":"unregister","token":"nothex","topic":"t","timestamp":"2026-11-21T10:00:00Z"}"#.utf8))
            Issue.record("accepted a bad token")
        } catch { #expect(error.code == .invalidToken) }
        let token = String(repeating: "cd", count: 32)
        do {
            _ = try TokenRegistryUpdate(json: Array(#"{"action":"unregister","token":"\#(token)","topic":"t","timestamp":"2026-11-21 10:00"}"#.utf8))
            Issue.record("accepted a bad timestamp")
        } catch { #expect(error.code == .schemaViolation) }
    }
}

@Suite struct FormattingTests {
    @Test func rfc3339RoundTripsWithMilliseconds() throws {
        let date = try #require(RFC3339.parse("2026-11-21T10:00:01.123Z"))
        #expect(RFC3339.format(date) == "2026-11-21T10:00:01.123Z")
        #expect(RFC3339.format(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.parse("2024-02-30T00:00:00Z") == nil)
        #expect(RFC3339.parse("2024-02-29T00:00:00-05:30") == Timestamp(millisecondsSince1970: 1_709_184_600_000))
        #expect(RFC3339.parse("2026-11-21T10:00:40.748Z")?.millisecondsSince1970 == 1_795_255_240_748, "no floating-point rounding")
        #expect(RFC3339.parse("2026-11-21T10:00:40.123456789Z")?.microsecondsSince1970 == 1_795_255_240_123_456, "finer digits are dropped")
    }

    @Test func apnsIDIsAStableLowercaseVersion5UUID() {
        let token = String(repeating: "ab", count: 32)
        let id = NotificationID.derive(eventID: "order-42", token: token)
        #expect(id == NotificationID.derive(eventID: "order-42", token: token))
        #expect(id != NotificationID.derive(eventID: "order-43", token: token))
        #expect(id == id.lowercased() && id.count == 36)
        #expect(Array(id)[14] == "5")
        #expect("89ab".contains(Array(id)[19]))
        #expect(UUID(uuidString: id) != nil)
        // RFC 4122's version 5 over Herald's namespace (Python's uuid.uuid5 gives the same).
        #expect(id == "7fdfcd06-f47f-54c5-8d68-7ac3743e4dbf")
        #expect(NotificationID.collapseID(eventID: "order-42") == "503d8dba8f95a9bc46efb022ac329627c8e9f79b")
    }

    @Test func resultJSONHasEveryFieldWithNullsForAbsentOnes() throws {
        let result = DeviceResult(
            eventID: "e", userID: "u", token: nil, topic: "t", environment: nil, status: .noDevices,
            apnsStatus: nil, reason: nil, apnsID: nil, attempts: 0, latencyMilliseconds: 3,
            completedAtMilliseconds: 1_763_719_201_123
        )
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.json())) as? [String: Any])
        #expect(
            Set(object.keys) == [
                "event_id", "user_id", "token", "topic", "environment", "status", "apns_status",
                "reason", "apns_id", "attempts", "latency_ms", "completed_at", "platform",
            ])
        #expect(object["token"] is NSNull)
        #expect(object["status"] as? String == "no_devices")
        #expect(object["completed_at"] as? String == "2025-11-21T10:00:01.123Z")
    }
}

/// An event's `fcm` part and a registration's `platform` at intake: what Herald would send to
/// Android is validated before anything is sent, with the dead-letter codes of the APNs side.
@Suite struct AndroidInputTests {
    static let fcm = #""fcm":{"package":"com.example.shop.android","message":{"data":{"k":"v"}}}"#

    @Test func anEventForAndroidOnlyNeedsNoTopicOrPayload() throws {
        let event = try NotificationEvent(json: Array(#"{"id":"e","user_ids":["u"],\#(Self.fcm)}"#.utf8))
        #expect(event.payload == nil && event.apnsTopic == nil)
        #expect(event.topic == "com.example.shop.android", "its outcomes are kept under the package")
        #expect(event.fcm?.package == "com.example.shop.android")
    }

    @Test func badAndroidPartsAreRefusedWithTheContractsCodes() {
        func code(_ json: String) -> InputRejection.Code? {
            do {
                _ = try NotificationEvent(json: Array(json.utf8))
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(#"{"id":"e","user_ids":["u"]}"#) == .schemaViolation, "neither payload nor fcm")
        #expect(code(#"{"id":"e","user_ids":["u"],"fcm":{"package":"p","message":{"data":{"n":1}}}}"#) == .schemaViolation, "data values are strings")
        #expect(code(#"{"id":"e","user_ids":["u"],"fcm":{"package":"p","message":{"token":"t"}}}"#) == .schemaViolation, "Herald sets the target")
        let big = String(repeating: "x", count: 5000)
        #expect(code(#"{"id":"e","user_ids":["u"],"fcm":{"package":"p","message":{"data":{"k":"\#(big)"}}}}"#) == .payloadTooLarge)
    }

    static func registration(_ fields: String) -> [UInt8] {
        Array(#"{"action":"register","user_id":"u",\#(fields),"timestamp":"2026-11-21T10:00:00Z"}"#.utf8)
    }

    @Test func anFCMRegistrationKeepsItsTokenAsGivenAndAnAPNsOneIsNormalised() throws {
        let token = "cAbC-123:APA91b_MiXeD"
        let fcm = try TokenRegistryUpdate(json: Self.registration(#""token":"\#(token)","topic":"p","platform":"fcm","fcm_target":"fid""#))
        #expect(fcm.token == token && fcm.platform == .fcm && fcm.fcmTarget == .fid)
        let hex = "<AB CD " + String(repeating: "ef", count: 15) + ">"
        let apns = try TokenRegistryUpdate(json: Self.registration(#""token":"\#(hex)","topic":"t""#))
        #expect(apns.platform == .apns && apns.token == "abcd" + String(repeating: "ef", count: 15))
        #expect(throws: InputRejection.self) {
            try TokenRegistryUpdate(json: Self.registration(#""token":"has space","topic":"p","platform":"fcm""#))
        }
        #expect(throws: InputRejection.self) {
            try TokenRegistryUpdate(json: Self.registration(#""token":"t","topic":"p","platform":"fcm","environment":"sandbox""#))
        }
    }
}
