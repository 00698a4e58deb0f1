/// Delivers events one at a time, in the order they come, when zones run in parallel.
actor SerialEvents {
    private let handler: SyncEventHandler
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(_ handler: @escaping SyncEventHandler) { self.handler = handler }

    func deliver(_ event: SyncEvent) async {
        if busy {
            await withCheckedContinuation { waiting.append($0) }
        }
        busy = true
        await handler(event)
        if waiting.isEmpty {
            busy = false
        } else {
            waiting.removeFirst().resume()
        }
    }
}
