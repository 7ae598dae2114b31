//! The servers of a snapshot: each record in a slot of its own, and the
//! occupied slots in id order.
//!
//! The state owner writes one server's record per observation, a thousand
//! or more times a second, and publishes ten times a second. Everything
//! here is shared with the published snapshots and copied on the first
//! write after a publish, so what a write copies is kept small:
//! - the records are held in chunks of 16 slots: the first write to
//!   a chunk after a publish copies its pointers, not every server's (at
//!   a thousand servers and a few pings between publishes, copying and
//!   later dropping a pointer per server was most of the owner's work);
//! - the ids are held apart, written only as servers come and go, so a
//!   chunk's copy does not touch them.
//!
//! A persistent tree, the predecessor of the slots, looked every write up
//! by comparing ids down a path and copied that path. Readers look a
//! server up by id with a binary search of the order.
//!
//! Generic over the record (the snapshot's `ServerRecord`), so this file
//! and the snapshot's do not name each other.

use std::sync::Arc;

/// A server's place in [`Servers`], stable while it is in the fleet.
pub type Slot = u32;

/// Slots per chunk of records. Smaller chunks copy fewer pointers on the
/// first write to each after a publish, and more on the first write of
/// all (one per chunk): at 16, a thousand servers copy 63 pointers a
/// publish, and 16 more for each chunk written.
const CHUNK: usize = 16;

/// The records of [`CHUNK`] consecutive slots.
type Chunk<R> = [Option<Arc<R>>; CHUNK];

/// Servers by id, in id order; see the module documentation.
#[derive(Debug)]
pub struct Servers<R> {
    /// Ids by slot; a removed server's slot is empty until reused.
    ids: Arc<Vec<Option<Arc<str>>>>,
    /// Records by slot, in chunks; empty where the id is.
    records: Arc<Vec<Arc<Chunk<R>>>>,
    /// The occupied slots, in id order.
    order: Arc<Vec<Slot>>,
    /// Empty slots, reused first.
    free: Vec<Slot>,
}

impl<R> Default for Servers<R> {
    fn default() -> Self {
        Servers {
            ids: Arc::default(),
            records: Arc::default(),
            order: Arc::default(),
            free: Vec::new(),
        }
    }
}

impl<R> Clone for Servers<R> {
    fn clone(&self) -> Self {
        Servers {
            ids: self.ids.clone(),
            records: self.records.clone(),
            order: self.order.clone(),
            free: self.free.clone(),
        }
    }
}

impl<R> Servers<R> {
    /// Servers held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no server is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// `id`'s record.
    pub fn get(&self, id: &str) -> Option<&Arc<R>> {
        let at = self.position(id).ok()?;
        self.at(self.order[at]).map(|(_, r)| r)
    }

    /// Whether `id` is held.
    pub fn contains_key(&self, id: &str) -> bool {
        self.position(id).is_ok()
    }

    /// Ids and records, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<R>)> {
        (self.order.iter()).filter_map(|&s| self.at(s))
    }

    /// Records, in id order.
    pub fn values(&self) -> impl Iterator<Item = &Arc<R>> {
        self.iter().map(|(_, r)| r)
    }

    /// Hold `record` as `id`'s: in its slot when it is held already (the
    /// record it replaces returned), else in a free one. Says which slot.
    pub fn insert(&mut self, id: Arc<str>, record: Arc<R>) -> (Slot, Option<Arc<R>>) {
        match self.position(&id) {
            Ok(at) => {
                let slot = self.order[at];
                let old = self.record_mut(slot).and_then(|r| r.replace(record));
                (slot, old)
            }
            Err(at) => {
                let slot = match self.free.pop() {
                    Some(slot) => slot,
                    None => {
                        let ids = Arc::make_mut(&mut self.ids);
                        ids.push(None);
                        if ids.len() > self.records.len() * CHUNK {
                            Arc::make_mut(&mut self.records)
                                .push(Arc::new(std::array::from_fn(|_| None)));
                        }
                        Slot::try_from(ids.len() - 1).expect("fewer than 2^32 servers")
                    }
                };
                Arc::make_mut(&mut self.ids)[slot as usize] = Some(id);
                if let Some(r) = self.record_mut(slot) {
                    *r = Some(record);
                }
                Arc::make_mut(&mut self.order).insert(at, slot);
                (slot, None)
            }
        }
    }

    /// Stop holding `id`: its record.
    pub fn remove(&mut self, id: &str) -> Option<Arc<R>> {
        let at = self.position(id).ok()?;
        let slot = Arc::make_mut(&mut self.order).remove(at);
        self.free.push(slot);
        Arc::make_mut(&mut self.ids)[slot as usize] = None;
        self.record_mut(slot)?.take()
    }

    /// The record in `slot`, to write: the first write to its chunk after
    /// a publish copies the chunk's pointers, not the records.
    pub fn slot_mut(&mut self, slot: Slot) -> Option<&mut Arc<R>> {
        self.record_mut(slot)?.as_mut()
    }

    /// `slot`'s place in its chunk, the chunk copied if a snapshot shares it.
    fn record_mut(&mut self, slot: Slot) -> Option<&mut Option<Arc<R>>> {
        let slot = slot as usize;
        let chunk = Arc::make_mut(&mut self.records).get_mut(slot / CHUNK)?;
        Some(&mut Arc::make_mut(chunk)[slot % CHUNK])
    }

    fn at(&self, slot: Slot) -> Option<(&Arc<str>, &Arc<R>)> {
        let slot = slot as usize;
        let id = self.ids.get(slot)?.as_ref()?;
        let record = self.records.get(slot / CHUNK)?[slot % CHUNK].as_ref()?;
        Some((id, record))
    }

    /// Where `id` is (`Ok`) or would go (`Err`) in the order.
    fn position(&self, id: &str) -> Result<usize, usize> {
        (self.order).binary_search_by(|&s| {
            let held = self.ids.get(s as usize).and_then(Option::as_deref);
            held.unwrap_or("").cmp(id)
        })
    }
}

impl<'a, R> IntoIterator for &'a Servers<R> {
    type Item = (&'a Arc<str>, &'a Arc<R>);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<R> std::ops::Index<&str> for Servers<R> {
    type Output = Arc<R>;

    /// `id`'s record; panics when it is not held, as a map's index does.
    fn index(&self, id: &str) -> &Arc<R> {
        self.get(id).expect("no server of that id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids<R>(s: &Servers<R>) -> Vec<&str> {
        s.iter().map(|(id, _)| &**id).collect()
    }

    fn record(text: &str) -> Arc<String> {
        Arc::new(text.to_owned())
    }

    #[test]
    fn ids_come_in_order_whatever_the_order_they_came_in() {
        let mut s = Servers::default();
        for id in ["m", "b", "z", "a", "q"] {
            s.insert(Arc::from(id), record(id));
        }
        assert_eq!(ids(&s), ["a", "b", "m", "q", "z"]);
        assert_eq!(s.len(), 5);
        assert_eq!(*s["q"], "q");
        assert!(s.get("c").is_none());
        assert!(s.contains_key("z") && !s.contains_key("y"));
    }

    #[test]
    fn a_slot_is_stable_while_held_and_reused_once_free() {
        let mut s = Servers::default();
        let (a, _) = s.insert(Arc::from("a"), record("a"));
        let (b, _) = s.insert(Arc::from("b"), record("b"));
        let (again, old) = s.insert(Arc::from("a"), record("a2"));
        assert_eq!((again, old.as_deref().map(String::as_str)), (a, Some("a")));
        assert_eq!(*s["a"], "a2", "replaced in place");
        assert!(s.remove("a").is_some());
        assert!(s.remove("a").is_none(), "gone");
        assert!(s.slot_mut(a).is_none(), "an empty slot holds nothing");
        let (c, _) = s.insert(Arc::from("c"), record("c"));
        assert_eq!(c, a, "the free slot is reused");
        assert_eq!(ids(&s), ["b", "c"]);
        assert_eq!(s.slot_mut(b).map(|r| r.as_str()), Some("b"));
    }

    #[test]
    fn many_servers_come_and_go_as_a_map_of_them_would() {
        // Past one chunk, with removals and reuse: the model is a map.
        let mut s = Servers::default();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..200u32 {
            let id = format!("s{:03}", (i * 37) % 101);
            if i % 5 == 4 {
                assert_eq!(s.remove(&id).is_some(), model.remove(&id).is_some(), "{id}");
            } else {
                let (slot, _) = s.insert(Arc::from(id.as_str()), record(&format!("{id}/{i}")));
                model.insert(id.clone(), format!("{id}/{i}"));
                assert_eq!(
                    s.slot_mut(slot).map(|r| r.as_str().to_owned()),
                    model.get(&id).cloned()
                );
            }
        }
        let held: Vec<(String, String)> = s
            .iter()
            .map(|(id, r)| (id.to_string(), (**r).clone()))
            .collect();
        let want: Vec<(String, String)> = model.into_iter().collect();
        assert_eq!(held, want);
        assert_eq!(s.len(), want.len());
    }

    #[test]
    fn a_write_after_a_publish_copies_its_chunk_only() {
        let mut s = Servers::default();
        let slots: Vec<Slot> = (0..3 * CHUNK)
            .map(|i| {
                s.insert(Arc::from(format!("s{i:03}").as_str()), record("x"))
                    .0
            })
            .collect();
        let published = s.clone();
        let written = slots[CHUNK + 1];
        *Arc::make_mut(s.slot_mut(written).expect("held")) = "written".to_owned();
        let shared: Vec<bool> = (s.records.iter().zip(published.records.iter()))
            .map(|(a, b)| Arc::ptr_eq(a, b))
            .collect();
        assert_eq!(
            shared,
            [true, false, true],
            "only the written slot's chunk is copied"
        );
        assert!(Arc::ptr_eq(&s.ids, &published.ids), "a write copies no id");
        assert_eq!(*published["s017"], "x");
        assert_eq!(*s["s017"], "written");
    }

    #[test]
    fn a_published_copy_never_sees_a_later_write() {
        let mut s = Servers::default();
        let (slot, _) = s.insert(Arc::from("a"), record("a"));
        let published = s.clone();
        let r = s.slot_mut(slot).expect("held");
        *Arc::make_mut(r) = "written".to_owned();
        s.insert(Arc::from("b"), record("b"));
        s.remove("a");
        assert_eq!(*published["a"], "a");
        assert_eq!(ids(&published), ["a"]);
        assert_eq!(ids(&s), ["b"]);
        assert_eq!(s.len(), 1);
    }
}
