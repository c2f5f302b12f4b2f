// KafkaJS transactions against one broker, run by test_transactions_kafkajs.py:
//   node kafkajs_transactions.js '<json settings>'      (NODE_PATH names the kafkajs install)
// On one partition of settings.topic: a committed transaction, an aborted one whose records
// are flushed to the log first, a committed one with the group's offset of settings.source
// (sendOffsets), an aborted one with another offset, then a committed "end". A
// read_committed consumer (readUncommitted: false) and a read_uncommitted one read up to
// "end". Prints one JSON object: what each step saw.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const settings = JSON.parse(process.argv[2])
const kafka = new Kafka({
  clientId: 'kafkajs-transactions',
  brokers: [settings.bootstrap],
  logLevel: logLevel.NOTHING,
  retry: { retries: 5 },
})

function values(prefix, count) {
  return Array.from({ length: count }, (_, i) => ({ value: `${prefix}-${i}` }))
}

async function transaction(producer, messages, { commit, offset }) {
  const txn = await producer.transaction()
  await txn.send({ topic: settings.topic, messages })
  if (offset !== undefined) {
    await txn.sendOffsets({
      consumerGroupId: settings.group,
      topics: [{ topic: settings.source, partitions: [{ partition: 0, offset: String(offset) }] }],
    })
  }
  if (commit) await txn.commit()
  else await txn.abort()
}

async function committedOffset(admin) {
  const [topic] = await admin.fetchOffsets({ groupId: settings.group, topics: [settings.source] })
  return topic.partitions[0].offset
}

// The markers (and so the group's offsets) are written after EndTxn is answered, as in Kafka:
// the offset once it is `expected`, else the last one seen within 10 s.
async function awaitOffset(admin, expected) {
  const deadline = Date.now() + 10000
  let offset = await committedOffset(admin)
  while (offset !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    offset = await committedOffset(admin)
  }
  return offset
}

async function readUntilEnd(readUncommitted) {
  const consumer = kafka.consumer({
    groupId: `reader-${readUncommitted ? 'uncommitted' : 'committed'}-${settings.topic}`,
    readUncommitted,
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [settings.topic], fromBeginning: true })
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "end" in ${settings.topic}: ${seen}`)), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        const value = message.value.toString()
        seen.push(value)
        if (value === 'end') {
          clearTimeout(timer)
          resolve()
        }
      },
    })
  })
  await consumer.disconnect()
  return seen
}

async function main() {
  const result = {}
  const admin = kafka.admin()
  await admin.connect()
  const producer = kafka.producer({
    transactionalId: settings.transactionalId,
    idempotent: true,
    maxInFlightRequests: 1,
  })
  await producer.connect()
  try {
    await admin.createTopics({
      topics: [
        { topic: settings.topic, numPartitions: 1 },
        { topic: settings.source, numPartitions: 1 },
      ],
      waitForLeaders: true,
    })
    await transaction(producer, values('committed', 3), { commit: true })
    await transaction(producer, values('aborted', 2), { commit: false })
    await transaction(producer, values('with-offsets', 2), { commit: true, offset: 5 })
    result.offsetAfterCommit = await awaitOffset(admin, '5')
    await transaction(producer, values('aborted-with-offsets', 2), { commit: false, offset: 9 })
    await transaction(producer, [{ value: 'end' }], { commit: true })
    result.readCommitted = await readUntilEnd(false)
    result.readUncommitted = await readUntilEnd(true)
    // decided: the "end" transaction could not begin before the abort was complete
    result.offsetAfterAbort = await committedOffset(admin)
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }
  process.stdout.write(JSON.stringify(result))
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
