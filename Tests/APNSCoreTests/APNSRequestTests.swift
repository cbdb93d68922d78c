import APNSCore
import Testing

@Suite struct APNSRequestTests {
    static func request(topic: String, pushType: APNSPushType) -> APNSRequest {
        APNSRequest(
            deviceToken: "00ff",
            topic: topic,
            pushType: pushType,
            priority: .immediate,
            apnsID: "6f1c2d3e-4a5b-5c6d-8e7f-8091a2b3c4d5",
            payload: []
        )
    }

    @Test(arguments: APNSPushType.allCases)
    func bundleIDIsTheTopicWithoutItsPushTypeSuffix(pushType: APNSPushType) {
        let topic = pushType.apnsTopic(bundleID: "com.example.shop")
        #expect(Self.request(topic: topic, pushType: pushType).bundleID == "com.example.shop")
    }

    @Test func aTopicWithoutTheExpectedSuffixIsKeptWhole() {
        #expect(Self.request(topic: "com.example.shop", pushType: .voip).bundleID == "com.example.shop")
        #expect(Self.request(topic: ".voip", pushType: .voip).bundleID == ".voip")
    }
}
